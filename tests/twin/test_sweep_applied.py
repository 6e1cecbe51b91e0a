"""Every value a sweep reports is a value its run used: a swept `simulation.num_steps` on a trace
replays that many of the trace's steps (more than it holds is refused), and a swept setting a run
would ignore (the workload seed, which `--seeds` sets; a workload field on a recorded trace) is
refused before anything runs, naming the parameter."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pandas as pd
import pytest
from twin_scenarios import raw
from typer.testing import CliRunner

from dynaresize.cli import app
from dynaresize.config_io import ConfigError
from dynaresize.twin.config import ScenarioConfig
from dynaresize.twin.simulation import simulate
from dynaresize.twin.sweeps import plan_sweep, run_sweep
from dynaresize.twin.trace_source import open_trace

TRACE = Path(str(files("dynaresize") / "data" / "verl_one_step_off_example.jsonl"))
TRACE_STEPS = 60
SCENARIO = raw(policies=[{"kind": "hysteresis"}])


@pytest.fixture(autouse=True)
def _numpy_kernels(monkeypatch):
    monkeypatch.setenv("DYNARESIZE_NO_NUMBA", "1")


@pytest.fixture(scope="module")
def scenario() -> ScenarioConfig:
    return ScenarioConfig.model_validate(SCENARIO)


def test_swept_step_counts_on_a_trace_replay_that_many_of_its_steps(scenario):
    table = run_sweep(
        scenario,
        params=["simulation.num_steps=20,60"],
        traces=[TRACE],
        jobs=1,
        progress=False,
    )
    assert list(table["simulation.num_steps"]) == [20, 60]
    assert list(table["num_steps"]) == [20, 60]  # what ran is what the row says
    workload = open_trace(TRACE).to_workload().slice_steps(0, 20)
    short = scenario.model_copy(
        update={"simulation": scenario.simulation.model_copy(update={"num_steps": 20})}
    )
    direct = simulate(short, short.policies[0], workload=workload).summary
    first = table.iloc[0]
    assert first["total_time_s"] == pytest.approx(direct.total_s, rel=1e-12)
    assert first["offline_optimal_time_s"] < table.iloc[1]["offline_optimal_time_s"]
    assert table["run_key"].nunique() == 2 and table["baseline_key"].nunique() == 2


def test_more_steps_than_a_trace_holds_is_one_line_naming_both(tmp_path):
    import yaml

    config = tmp_path / "eight.yaml"
    config.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "out"
    args = ["sweep", "--config", str(config), "--trace", str(TRACE), "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--param", "simulation.num_steps=20,1000"])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert line.count("\n") == 0 and line.startswith("error: ")
    assert "simulation.num_steps=1000" in line and f"{TRACE_STEPS} steps" in line
    assert TRACE.name in line
    assert not out.exists()


@pytest.mark.parametrize(
    "param, traced, words",
    [
        ("simulation.seed=0,5", False, ["simulation.seed", "--seeds"]),
        ("simulation.seed=0,5", True, ["simulation.seed", "--seeds"]),
        ("workload.samples_per_step=64,128", True, ["workload.samples_per_step", TRACE.name]),
        ("workload=high_variance,growing_lengths", True, ["workload", TRACE.name]),
    ],
)
def test_a_swept_setting_the_runs_would_ignore_is_refused(scenario, param, traced, words):
    with pytest.raises(ConfigError) as err:
        plan_sweep(scenario, params=[param], traces=[TRACE] if traced else None)
    for word in words:
        assert word in str(err.value)


def test_seeds_on_a_trace_are_refused_since_every_seed_repeats_one_run(scenario):
    with pytest.raises(ConfigError, match="--seeds") as err:
        plan_sweep(scenario, seeds=3, traces=[TRACE])
    assert TRACE.name in str(err.value)
    # presets still take seeds, and workload fields apply to them
    plan = plan_sweep(
        scenario, params=["workload.samples_per_step=16,32"], seeds=2, workloads=["high_variance"]
    )
    table_points = pd.DataFrame([{**r.point, "seed": r.seed} for r in plan.runs])
    assert len(table_points) == 4 and set(table_points["seed"]) == {0, 1}
