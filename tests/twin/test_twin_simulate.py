"""simulate(): record tables in the trace schema, the summary's arithmetic, predictions, thrash."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from twin_scenarios import scenario

from dynaresize.policies.static import StaticConfig
from dynaresize.traces.schema import DecisionRecord, ResizePhaseRecord, StepRecord
from dynaresize.traces.synthetic import generate_workload
from dynaresize.twin.simulation import build_context, simulate
from dynaresize.twin.summary import count_thrash


def _missing(value: object) -> bool:
    """pandas holds a missing optional field as NA (or NaN in float and string columns)."""
    return not isinstance(value, (list, np.ndarray)) and bool(pd.isna(value))


@pytest.fixture(scope="module")
def greedy_run():
    return simulate(scenario(), {"kind": "greedy"})


def test_tables_are_exactly_the_schema_and_every_row_validates(greedy_run):
    for frame, record in [
        (greedy_run.steps, StepRecord),
        (greedy_run.resizes, ResizePhaseRecord),
        (greedy_run.decisions, DecisionRecord),
    ]:
        assert list(frame.columns) == list(record.model_fields)
        for row in frame.to_dict(orient="records"):
            clean = {k: (None if _missing(v) else v) for k, v in row.items()}
            record.model_validate(clean)


def test_decisions_and_resizes_agree(greedy_run):
    decisions = greedy_run.decisions
    assert len(decisions) == greedy_run.summary.num_steps - 1  # no call after the last step
    resized = decisions[decisions["decision"] == "resize"]
    assert resized["resize_id"].tolist() == list(range(len(resized)))
    assert greedy_run.resizes["resize_id"].nunique() == len(resized)
    assert greedy_run.summary.num_resizes == len(resized)


def test_summary_arithmetic(greedy_run):
    s = greedy_run.summary
    steps = greedy_run.steps
    assert np.isclose(s.total_s, steps["end_s"].iloc[-1])
    assert np.isclose(s.steps_per_hour, 3600 * len(steps) / s.total_s)
    assert np.isclose(s.tokens_per_s, steps["tokens"].sum() / s.total_s)
    totals = greedy_run.context.baselines.totals_s
    assert s.best_static_allocation == min(totals, key=totals.get)
    assert np.isclose(s.speedup_vs_best_static, min(totals.values()) / s.total_s)
    idle = steps["idle_train_gpu_s"].sum() + steps["idle_rollout_gpu_s"].sum()
    idle += s.resize_time_s * 8
    assert np.isclose(s.gpu_idle_fraction, idle / (8 * s.total_s))


def test_static_on_the_best_split_has_speedup_one_and_baseline_is_reported():
    cfg = scenario(simulation={"baseline_allocation": "6:2"})
    ctx = build_context(cfg)
    best = ctx.baselines.best_allocation
    cfg_best = scenario(
        cluster={"initial_allocation": best}, simulation={"baseline_allocation": "6:2"}
    )
    s = simulate(cfg_best, StaticConfig(), context=build_context(cfg_best)).summary
    assert s.speedup_vs_best_static == pytest.approx(1.0, rel=1e-12)
    assert s.baseline_allocation == "6:2"
    assert s.speedup_vs_baseline == pytest.approx(ctx.baselines.totals_s["6:2"] / s.total_s)


def test_predictions_never_look_ahead():
    cfg = scenario()
    workload = generate_workload(cfg.workload, cfg.simulation.num_steps, 0)
    changed = workload.response_tokens.copy()
    lo = workload.step_offsets[20]
    changed[lo:] *= 3  # only steps 20 and later differ
    other = type(workload)(workload.prompt_tokens, changed, workload.step_offsets)
    a = build_context(cfg, workload=workload).predicted_step_s
    b = build_context(cfg, workload=other).predicted_step_s
    np.testing.assert_array_equal(a[:20], b[:20])
    assert not np.allclose(a[20:], b[20:])


def test_count_thrash_counts_moves_undone_within_the_window():
    table = pd.DataFrame(
        {
            "step": [3, 5, 30, 31, 50],
            "from_allocation": ["6:2", "5:3", "6:2", "4:4", "6:2"],
            "to_allocation": ["5:3", "6:2", "4:4", "6:2", "5:3"],
        }
    )
    assert count_thrash(table, thrash_window_steps=10) == 2
    assert count_thrash(table, thrash_window_steps=1) == 1
    assert count_thrash(table.iloc[:1], thrash_window_steps=10) == 0


def test_greedy_thrashes_and_hysteresis_does_not_on_a_stationary_workload():
    # No regime switch: the imbalance keeps one sign on the best split and flips on its
    # neighbours, which is exactly what makes a memoryless rule oscillate.
    cfg = scenario(workload={"regime_switches": []}, simulation={"num_steps": 40})
    ctx = build_context(cfg)
    greedy = simulate(cfg, {"kind": "greedy"}, context=ctx).summary
    calm = simulate(cfg, {"kind": "hysteresis"}, context=ctx).summary
    assert greedy.thrash_count >= 3
    assert calm.thrash_count == 0
    assert calm.total_s < greedy.total_s


def test_policy_object_is_reset_before_reuse():
    from dynaresize.policies.registry import build_policy

    cfg = scenario()
    policy = build_policy({"kind": "hysteresis"})
    first = simulate(cfg, policy)
    second = simulate(cfg, policy)
    pd.testing.assert_frame_equal(first.decisions, second.decisions)


def test_observations_equal_validated_ones():
    """The pipeline builds observations without validation; they must be what validation gives."""
    from dynaresize.policies.types import Decision, StepObservation

    class Recorder:
        def __init__(self):
            self.seen = []

        def decide(self, obs):
            self.seen.append(obs)
            return Decision.hold("record")

        def reset(self):
            self.seen = []

    recorder = Recorder()
    simulate(scenario(), recorder)
    assert len(recorder.seen) == 29
    for obs in recorder.seen[::7]:
        again = StepObservation.model_validate(obs.model_dump())
        assert again == obs
        assert again.candidates == obs.candidates and again.recent == obs.recent
        assert obs.candidate(obs.allocation).predicted_resize_critical_s == 0.0
