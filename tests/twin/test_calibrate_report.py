"""What calibrate and break-even tell a user about their own fit: a warning when a stage fit
explains little of clearly varying measurements, each assumption once, and the Python API's
defaults documented and usable."""

from __future__ import annotations

import numpy as np
from analysis_traces import lognormal_workload, trace_from_costs

from dynaresize.twin.analysis import breakeven_for_trace
from dynaresize.twin.analysis_context import context_from_config
from dynaresize.twin.calibration import fit_costs
from dynaresize.twin.costs import CostModels
from dynaresize.twin.costs.memory import ModelConfig

MODEL = ModelConfig(num_params_b=1.5)


def _trace(*, scramble_train: bool):
    workload = lognormal_workload(40, 64, seed=3, growth=0.5)
    trace = trace_from_costs(workload, costs=CostModels(), model=MODEL, train_gpus=6)
    if scramble_train:
        # training times that have nothing to do with the tokens: a fit cannot explain them
        rng = np.random.default_rng(1)
        steps = trace.steps.copy()
        steps["train_s"] = steps["train_s"].mean() * rng.uniform(0.5, 1.5, len(steps))
        trace.steps = steps
    return trace


def test_a_poor_stage_fit_is_a_warning_and_a_good_one_is_not():
    good = fit_costs([_trace(scramble_train=False)], model=MODEL)
    assert good.warning_lines() == []
    poor = fit_costs([_trace(scramble_train=True)], model=MODEL)
    (warning,) = poor.warning_lines()
    assert warning.startswith("warning: the train fit explains little")
    assert f"R² {poor.stage('train').r2:.3f}" in warning


def test_breakeven_for_trace_needs_no_job_length():
    trace = _trace(scramble_train=False)
    report, _ = breakeven_for_trace(trace, context_from_config(None, [trace]))
    assert report.advice.job_steps == 1000


def test_calibrate_prints_each_resize_finding_once(tmp_path):
    from typer.testing import CliRunner
    from verl_log_factory import separate_async_lines, write_log

    from dynaresize.cli import app

    log = tmp_path / "sep.jsonl"
    write_log(log, separate_async_lines())
    args = ["calibrate", "--trace", str(log), "--out", str(tmp_path / "c.yaml")]
    result = CliRunner().invoke(app, [*args, "--train-gpus", "4", "--rollout-gpus", "4"])
    assert result.exit_code == 0, result.output
    findings = [line for line in result.output.splitlines() if "never run in the traces" in line]
    assert findings and len(findings) == len(set(findings))
    for line in findings:
        assert result.output.count(line.split(": ", 1)[1]) == 1
