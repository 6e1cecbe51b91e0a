"""The first training step after a resize: its fitted excess over the train model, per trainer
count, and what the twin charges for it (the larger of it and the background contention)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from twin_scenarios import scenario

from dynaresize.traces.phases import StrategyName
from dynaresize.twin.calibration.fit_first_step import (
    MIN_STEPS_PER_COUNT,
    fit_first_train_step,
)
from dynaresize.twin.costs import CostModels, load_costs
from dynaresize.twin.costs.memory import ModelConfig
from dynaresize.twin.costs.resize import ResizeCostParams, plan_resize
from dynaresize.twin.costs.train import TrainCostParams, train_stage_s
from dynaresize.twin.simulation import simulate

MODEL = ModelConfig(num_params_b=0.63)


def _plan(params: ResizeCostParams, trainers: tuple[int, int] | None):
    before, after = trainers if trainers else (None, None)
    return plan_resize(
        strategy=StrategyName.OVERLAPPED,
        model=MODEL,
        params=params,
        host_bandwidth_gbps=25.0,
        interconnect_bandwidth_gbps=400.0,
        trainers_before=before,
        trainers_after=after,
    )


def test_the_plan_charges_the_larger_of_contention_and_the_first_step_excess():
    base = ResizeCostParams(background_contention=0.5)
    contention = _plan(base, (2, 3)).slowdown_s
    assert contention > 0
    small = base.model_copy(update={"first_train_step_s": contention / 2})
    assert math.isclose(_plan(small, (2, 3)).slowdown_s, contention)
    large = base.model_copy(
        update={"first_train_step_s": 1.5, "first_train_step_s_by_trainers": {3: 4.0}}
    )
    assert _plan(large, (2, 3)).slowdown_s == 4.0  # the count's own figure
    assert _plan(large, (3, 1)).slowdown_s == 1.5  # a count without one: the general figure
    assert _plan(large, None).slowdown_s == 1.5  # the move is not known: the general figure
    # the critical path and the background tail do not change
    assert _plan(large, (2, 3)).critical_s == _plan(base, (2, 3)).critical_s
    assert _plan(large, (2, 3)).background_tail_s == _plan(base, (2, 3)).background_tail_s


@pytest.mark.parametrize("table", [{0: 1.0}, {2: -1.0}, {2: float("inf")}])
def test_first_step_figures_are_counts_and_finite_seconds(table):
    with pytest.raises(ValueError):
        ResizeCostParams(first_train_step_s_by_trainers=table)


def test_costs_files_without_the_fields_load_and_with_them_round_trip(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("resize:\n  coordination_s: 0.01\n")
    costs = load_costs(old)
    assert costs.resize.first_train_step_s == 0.0
    assert costs.resize.first_train_step_s_by_trainers == {}
    new = tmp_path / "new.yaml"
    new.write_text(
        "resize:\n  first_train_step_s: 0.5\n  first_train_step_s_by_trainers:\n    2: 3.25\n"
    )
    loaded = load_costs(new).resize
    assert loaded.first_train_step_s == 0.5
    assert loaded.first_train_step_s_by_trainers == {2: 3.25}
    dumped = CostModels(resize=loaded).model_dump(mode="json")["resize"]
    assert ResizeCostParams.model_validate(dumped) == loaded


def _steps(rows: list[tuple[int, float, float | None]], train: TrainCostParams) -> pd.DataFrame:
    """Steps of one run: (trainer count, excess over the train model, resize id)."""
    tokens = 10_000.0
    return pd.DataFrame(
        {
            "step": np.arange(len(rows)),
            "trace_index": 0,
            "tokens": tokens,
            "train_gpus": [n for n, _, _ in rows],
            "train_s": [
                float(train_stage_s(tokens, train_gpus=n, model=MODEL, params=train)) + excess
                for n, excess, _ in rows
            ],
            "resize_id": [np.nan if r is None else r for _, _, r in rows],
        }
    )


def test_the_fit_is_the_median_excess_per_count_and_over_all():
    train = TrainCostParams(fixed_overhead_s=1.0, s_per_token_one_gpu=1e-4)
    steps = _steps(
        [
            (2, 0.0, None),
            (2, 0.3, None),  # a steady step's noise is not a first step's excess
            (3, 1.0, 0),
            (3, 3.0, None),
            (1, -0.5, 1),  # faster than the model: no excess, not a negative one
            (2, 6.0, 2),
            (3, 2.0, 3),
            (2, 4.0, 4),
            (3, 9.0, 5),
        ],
        train,
    )
    fit = fit_first_train_step(steps, model=MODEL, train=train)
    assert MIN_STEPS_PER_COUNT == 2
    np.testing.assert_allclose(fit.excess_s, [1.0, 0.0, 6.0, 2.0, 4.0, 9.0], atol=1e-9)
    assert math.isclose(fit.general_s, 3.0, abs_tol=1e-9)  # median of the six
    assert set(fit.by_trainers) == {2, 3}  # one step on 1 trainer: it takes the general figure
    assert math.isclose(fit.by_trainers[2], 5.0, abs_tol=1e-9)
    assert math.isclose(fit.by_trainers[3], 2.0, abs_tol=1e-9)
    assert "per trainer count" in fit.describe()


def test_a_trace_without_resizes_fits_no_excess():
    train = TrainCostParams()
    steps = _steps([(2, 0.0, None), (2, 5.0, None)], train)
    fit = fit_first_train_step(steps, model=MODEL, train=train)
    assert fit.general_s == 0.0 and fit.by_trainers == {}
    assert "no such step" in fit.describe()


def test_the_simulated_first_step_after_a_move_pays_the_fitted_excess():
    cfg = scenario(
        costs={
            "resize": {
                "background_contention": 0.0,
                "first_train_step_s": 1.0,
                "first_train_step_s_by_trainers": {4: 3.0},
            }
        }
    )
    result = simulate(cfg, {"kind": "scheduled", "schedule": "4@4:4"})
    steps = result.steps.set_index("step")
    costs = result.context.step_costs
    target = costs.index(cfg.cluster.candidate_allocations[2])
    assert steps.loc[5, "train_gpus"] == 4
    plan = result.context.plan
    expected = max(costs.train_s[5, target] + 3.0, plan.background_tail_s)
    assert np.isclose(steps.loc[5, "train_s"], expected)
    assert np.isclose(steps.loc[6, "train_s"], costs.train_s[6, target])  # only the first step
