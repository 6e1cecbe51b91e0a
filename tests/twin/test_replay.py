"""Replay: the twin reproduces its own traces, and the comparison and its outputs hold together."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from analysis_traces import lognormal_workload, trace_from_costs
from twin_scenarios import preset_scenario
from typer.testing import CliRunner

from dynaresize.cli import app
from dynaresize.traces.io import Trace, write_trace
from dynaresize.traces.schema import RunMeta
from dynaresize.twin.analysis.replay import (
    OFFLINE_OPTIMUM,
    RECORDED_MEASURED,
    RECORDED_PREDICTED,
    replay_trace,
)
from dynaresize.twin.analysis_context import context_from_config
from dynaresize.twin.config import ScenarioConfig
from dynaresize.twin.costs import CostModels
from dynaresize.twin.costs.memory import ModelConfig
from dynaresize.twin.simulation import build_context, simulate
from dynaresize.twin.trace_source import workload_samples


def _scenario(num_steps: int) -> ScenarioConfig:
    return preset_scenario("growing_lengths", samples_per_step=64, num_steps=num_steps)


def _twin_trace(config: ScenarioConfig, schedule: list[dict]) -> Trace:
    """A trace the twin itself wrote: its step table plus the per-sample lengths it used."""
    context = build_context(config)
    result = simulate(config, {"kind": "scheduled", "schedule": schedule}, context=context)
    samples = workload_samples(context.workload)
    meta = RunMeta(source="twin", model_params_b=8.0)
    return Trace(meta=meta, steps=result.steps, samples=samples).validated(source="twin")


def test_twin_reproduces_its_own_trace_exactly():
    config = _scenario(40)
    schedule = [{"step": 14, "allocation": "4:4"}]
    trace = _twin_trace(config, schedule)
    context = context_from_config(config, [trace])
    result = replay_trace(trace, context, policies=["static", "hysteresis"], fit_to_trace=False)
    table = result.table.set_index("name")
    measured = table.loc[RECORDED_MEASURED, "total_s"]
    assert table.loc[RECORDED_PREDICTED, "total_s"] == pytest.approx(measured, rel=1e-9)
    assert result.prediction_error == pytest.approx(0.0, abs=1e-9)
    assert result.step_time_mape == pytest.approx(0.0, abs=1e-9)
    assert table.loc[RECORDED_PREDICTED, "num_resizes"] == 1
    # static rows are the twin's own static baselines on the same workload
    baselines = build_context(config).baselines.totals_s
    for label, total in baselines.items():
        assert table.loc[f"static {label}", "total_s"] == pytest.approx(total, rel=1e-9)
    # the optimum bounds every simulated row, and its regret is zero
    optimum = table.loc[OFFLINE_OPTIMUM, "total_s"]
    simulated = table[table["kind"] != "recorded"]
    assert (simulated["total_s"] >= optimum - 1e-6).all()
    assert table.loc[OFFLINE_OPTIMUM, "regret_s"] == 0.0
    # regret is the gap to the optimum; a gap at rounding level is the optimum itself (0)
    np.testing.assert_allclose(table["regret_s"], table["total_s"] - optimum, rtol=0, atol=1e-6)


def test_fitted_replay_explains_a_noisy_trace():
    workload = lognormal_workload(80, 128, seed=4, growth=1.5)
    gpus = np.where(np.arange(80) < 40, 6, 4)
    trace = trace_from_costs(
        workload, costs=CostModels(), model=ModelConfig(num_params_b=8), train_gpus=gpus, noise=0.02
    )
    context = context_from_config(None, [trace])
    result = replay_trace(trace, context, policies=["greedy"])
    assert abs(result.prediction_error) < 0.05
    assert result.fit is not None and result.fit.stage("rollout").r2 > 0.8
    kinds = result.table["kind"].tolist()
    assert kinds.count("static") == len(context.candidates)
    assert kinds.count("policy") == 1 and kinds[-1] == "optimum"
    assert any(n.startswith("twin vs measured") for n in result.notes)
    assert any("assumed" in n for n in result.notes)


def test_trace_on_a_split_outside_the_candidates_is_rejected():
    config = _scenario(12)
    trace = _twin_trace(config, [])
    steps = trace.steps.copy()
    steps["train_gpus"], steps["rollout_gpus"] = 7, 1
    steps["device_roles"] = [["train"] * 7 + ["rollout"]] * len(steps)
    odd = Trace(meta=trace.meta, steps=steps, samples=trace.samples)
    with pytest.raises(ValueError, match="7:1"):
        replay_trace(odd, context_from_config(config, [odd]), policies=["static"])


def test_replay_cli_writes_table_plot_and_costs(tmp_path):
    workload = lognormal_workload(30, 64, seed=1)
    trace = trace_from_costs(
        workload, costs=CostModels(), model=ModelConfig(num_params_b=8), train_gpus=6, noise=0.02
    )
    path = tmp_path / "trace"
    write_trace(path, trace)
    out = tmp_path / "out"
    args = [
        "run",
        "--mode",
        "replay",
        "--trace",
        str(path),
        "--policy",
        "greedy",
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "offline optimum" in result.output and "twin vs measured" in result.output
    for name in ("replay.csv", "replay.json", "replay.png", "costs.yaml", "config.json"):
        assert (out / name).is_file(), name
    table = pd.read_csv(out / "replay.csv")
    assert table["name"].tolist()[0] == RECORDED_MEASURED
    payload = json.loads((out / "replay.json").read_text())
    assert abs(payload["prediction_error"]) < 0.1


def test_replay_cli_bad_trace_exits_2_without_output(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"record": "step", "step": "x"}\n')
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["run", "--mode", "replay", "--trace", str(bad), "--out", str(out)]
    )
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    "name", ["verl_one_step_off_example.jsonl", "verl_colocated_example.jsonl"]
)
def test_shipped_verl_logs_replay_and_break_even(name):
    from pathlib import Path

    import dynaresize

    path = Path(dynaresize.__file__).parent / "data" / name
    result = CliRunner().invoke(app, ["run", "--mode", "replay", "--trace", str(path)])
    assert result.exit_code == 0, result.output
    assert "offline optimum" in result.output and "imported from verl" in result.output
    line = next(x for x in result.output.splitlines() if "twin vs measured" in x)
    error_pct = float(line.split("total ")[1].split("%")[0])
    assert abs(error_pct) < 5.0
    result = CliRunner().invoke(app, ["breakeven", "--trace", str(path), "--job-steps", "500"])
    assert result.exit_code == 0, result.output
    # either settings, or the advice to keep the split and none (never both)
    assert ("cooldown_steps:" in result.output) != ("keep the split" in result.output)
