"""Break-even against hand arithmetic, the bootstrap interval, imbalance runs, advice and CLI."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import typer
from analysis_traces import lognormal_workload, trace_from_costs
from typer.testing import CliRunner

from dynaresize.commands import breakeven as breakeven_command
from dynaresize.policies.types import Allocation
from dynaresize.traces.io import write_trace
from dynaresize.twin.analysis.breakeven import (
    analyse,
    block_bootstrap_means,
    break_even_steps,
    paper_break_even_steps,
    recommended_consecutive_signals,
    recommended_threshold,
    run_lengths,
    signed_imbalance,
    transition_break_even,
)
from dynaresize.twin.analysis.trace_breakeven import measured_resize_cost_s
from dynaresize.twin.costs import CostModels
from dynaresize.twin.costs.memory import ModelConfig

SIX_TWO, FOUR_FOUR = Allocation.parse("6:2"), Allocation.parse("4:4")


def test_paper_numbers_by_hand():
    # 187.2 s / (39.84 s - 23.93 s) = 187.2 / 15.91 = 11.766...
    assert paper_break_even_steps() == pytest.approx(187.2 / 15.91)
    assert round(paper_break_even_steps(), 1) == 11.8
    assert break_even_steps(187.2, 0.0) is None
    assert break_even_steps(187.2, -1.0) is None


def _paper_steps(num_steps: int) -> pd.DataFrame:
    # Measured: rollout-bound on 6:2 (rollout 38 s, train 20 s), as in the paper's Exp#1.
    return pd.DataFrame(
        {"rollout_s": np.full(num_steps, 38.0), "train_s": np.full(num_steps, 20.0)}
    )


def test_analyse_on_paper_numbers_matches_hand_arithmetic():
    steady = np.tile([39.84, 23.93], (50, 1))
    report = analyse(
        steps=_paper_steps(50),
        steady_step_s=steady,
        candidates=(SIX_TWO, FOUR_FOUR),
        current=SIX_TWO,
        cost_s=187.2,
        cost_source="paper",
        total_gpus=8,
        job_steps=100,
    )
    move = next(t for t in report.transitions if t.from_allocation == "6:2")
    back = next(t for t in report.transitions if t.from_allocation == "4:4")
    assert move.steps == pytest.approx(11.766, abs=1e-3)
    # constant savings: the interval collapses onto the point
    assert move.ci_low_steps == pytest.approx(move.steps)
    assert move.ci_high_steps == pytest.approx(move.steps)
    assert back.steps is None
    advice = report.advice
    assert advice.best_move == "6:2 -> 4:4"
    assert advice.dwell_steps == 12 and advice.cooldown_steps == 12
    saved_s = 100 * 15.91 - 187.2  # 1403.8 s
    assert advice.projected_saving_hours == pytest.approx(saved_s / 3600)
    assert advice.projected_saving_gpu_hours == pytest.approx(saved_s / 3600 * 8)
    assert advice.projected_job_hours_static == pytest.approx(100 * 39.84 / 3600)
    # one rollout-bound run covering the whole trace, imbalance (38 - 20) / 38
    assert report.runs.rollout_bound_steps.tolist() == [50]
    assert advice.up_threshold == pytest.approx(18 / 38)
    assert advice.down_threshold is None  # nothing to move towards Training from 6:2 here


def test_bootstrap_interval_contains_point_and_is_reproducible():
    rng = np.random.default_rng(1)
    savings = 15.91 + rng.normal(0, 4.0, 400)
    a = transition_break_even(from_label="6:2", to_label="4:4", cost_s=187.2, savings_s=savings)
    b = transition_break_even(from_label="6:2", to_label="4:4", cost_s=187.2, savings_s=savings)
    assert a == b
    assert a.ci_low_steps < a.steps < a.ci_high_steps
    assert a.steps == pytest.approx(187.2 / savings.mean())
    wider = transition_break_even(
        from_label="6:2", to_label="4:4", cost_s=187.2, savings_s=15.91 + 3 * (savings - 15.91)
    )
    assert wider.ci_high_steps - wider.ci_low_steps > a.ci_high_steps - a.ci_low_steps


def test_interval_unbounded_when_saving_may_vanish():
    savings = np.array([5.0, -4.0] * 20)
    result = transition_break_even(from_label="a", to_label="b", cost_s=10.0, savings_s=savings)
    assert result.steps == pytest.approx(20.0)
    assert result.ci_high_steps is None


def test_block_bootstrap_means_centre_on_the_mean():
    values = np.arange(100, dtype=float)
    means = block_bootstrap_means(values, num_resamples=4000, seed=0)
    assert means.mean() == pytest.approx(values.mean(), rel=0.02)
    constant = block_bootstrap_means(np.full(10, 3.0), num_resamples=10, seed=0)
    assert np.allclose(constant, 3.0)


def test_run_lengths_and_imbalance_by_hand():
    mask = np.array([1, 1, 0, 1, 0, 0, 1, 1, 1], bool)
    assert run_lengths(mask).tolist() == [2, 1, 3]
    assert run_lengths(np.zeros(3, bool)).tolist() == []
    imbalance = signed_imbalance(np.array([30.0, 10.0, 0.0]), np.array([10.0, 20.0, 0.0]))
    assert imbalance.tolist() == pytest.approx([20 / 30, -10 / 20, 0.0])


def test_consecutive_signals_by_hand():
    # break-even 10: three runs of 2 steps never repay, the run of 30 does.
    # k=1: 1 repaid - 3 wasted = -2; k=2: same; k=3: only the 30-step run triggers: +1.
    assert recommended_consecutive_signals(np.array([2, 2, 2, 30]), 10.0) == 3
    assert recommended_consecutive_signals(np.array([40, 50]), 10.0) == 1
    assert recommended_consecutive_signals(np.array([], dtype=np.int64), 10.0) == 1


def test_threshold_by_hand():
    # cost 100 s over a 10-step horizon needs 10 s a step on average from the top down:
    # |imbalance| 0.9 -> 20 s, 0.5 -> 10 s (mean 15), 0.2 -> 0 s (mean 10), 0.1 -> -10 s (mean 5).
    abs_imbalance = np.array([0.1, 0.9, 0.2, 0.5])
    savings = np.array([-10.0, 20.0, 0.0, 10.0])
    assert recommended_threshold(abs_imbalance, savings, cost_s=100, horizon_steps=10) == 0.2
    assert recommended_threshold(abs_imbalance, savings, cost_s=1000, horizon_steps=10) is None


def test_measured_resize_cost_from_critical_phases():
    resizes = pd.DataFrame(
        {
            "resize_id": [0, 0, 0, 1],
            "start_s": [100.0, 150.0, 150.0, 500.0],
            "end_s": [150.0, 290.0, 400.0, 600.0],
            "critical": [True, True, False, True],
        }
    )
    # resize 0 stalls 100 -> 290 (190 s; the background phase does not count), resize 1: 100 s
    assert measured_resize_cost_s(resizes) == pytest.approx(145.0)
    assert measured_resize_cost_s(resizes.iloc[0:0]) is None
    # where the steps show the stall, it counts whole (here 5 s more than the phases each)
    steps = pd.DataFrame(
        {
            "step": [0, 1, 2],
            "start_s": [0.0, 295.0, 605.0],
            "end_s": [100.0, 500.0, 700.0],
            "resize_id": [None, 0, 1],
        }
    )
    assert measured_resize_cost_s(resizes, steps) == pytest.approx(150.0)


def _cli():
    app = typer.Typer(pretty_exceptions_enable=False)
    breakeven_command.register(app)
    app.command("noop")(lambda: None)
    return app


def test_breakeven_cli_end_to_end(tmp_path):
    workload = lognormal_workload(60, 256, seed=2, growth=1.0)
    trace = trace_from_costs(
        workload, costs=CostModels(), model=ModelConfig(num_params_b=8), train_gpus=6, noise=0.02
    )
    path = tmp_path / "trace.jsonl"
    write_trace(path, trace)
    result = CliRunner().invoke(
        _cli(), ["breakeven", "--trace", str(path), "--job-steps", "2000", "--seed", "3"]
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "rollout: R²=" in out and "trace ran mostly on 6:2" in out
    assert "cooldown_steps:" in out and "job of 2000 steps" in out
    line = next(x for x in out.splitlines() if x.startswith("6:2 -> 4:4"))
    saving, steps = float(line.split()[3]), float(line.split()[4])
    cost = float(out.split("resize critical path: ")[1].split(" s")[0])
    assert steps == pytest.approx(cost / saving, rel=0.01)
    assert math.isfinite(steps)


def test_breakeven_cli_bad_input(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    result = CliRunner().invoke(_cli(), ["breakeven", "--trace", str(bad)])
    assert result.exit_code == 2
    assert "error:" in result.output and "Traceback" not in result.output


def test_breakeven_on_a_verl_log_with_the_paper_config():
    from pathlib import Path

    import dynaresize
    from dynaresize.cli import app

    path = Path(dynaresize.__file__).parent / "data" / "verl_one_step_off_example.jsonl"
    args = ["breakeven", "--trace", str(path), "--config", "paper", "--job-steps", "1000"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    # the paper preset's overlapped resize stalls 187.2 s (facts.md, Exp#2)
    assert "resize critical path: 187.2 s" in result.output
    for line in result.output.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[1] == "->" and parts[4] != "never":
            assert float(parts[4]) == pytest.approx(187.2 / float(parts[3]), rel=0.01)
