"""A GPU count that a veRL log's perf/throughput contradicts is refused in one line naming every
input that took part: the log and whichever gave the count (the log's sidecar file, the
command's split flags, or the config's initial split), by the path the user gave."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner
from verl_log_factory import GPUS, one_step_off_run, write_log

from dynaresize.cli import app

STEPS = 12


@pytest.fixture()
def log(tmp_path):
    path = tmp_path / "logs" / "run.jsonl"
    path.parent.mkdir()
    write_log(path, one_step_off_run(STEPS))
    return path


def _sidecar(log, **facts) -> str:
    path = log.with_name(log.name + ".import.json")
    path.write_text(json.dumps(facts))
    return str(path)


def _error_line(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert line.startswith("error: ") and line.count("\n") == 0, line
    return line


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--mode", "replay"],
        ["breakeven"],
        ["calibrate", "--out", "costs.yaml"],
    ],
)
def test_a_contradicting_sidecar_is_named_beside_the_log(log, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    sidecar = _sidecar(log, train_gpus=6, rollout_gpus=6)
    line = _error_line([*command, "--trace", str(log)])
    assert str(log) in line and sidecar in line
    assert "12 GPUs" in line and f"perf/throughput implies {GPUS}" in line
    assert not (tmp_path / "costs.yaml").exists()


def test_a_sidecar_giving_num_gpus_is_named_too(log):
    sidecar = _sidecar(log, num_gpus=16)
    line = _error_line(["run", "--mode", "replay", "--trace", str(log)])
    assert sidecar in line and "num_gpus = 16 GPUs" in line


def test_flags_that_contradict_the_log_are_named_not_the_sidecar(log):
    sidecar = _sidecar(log, train_gpus=4, rollout_gpus=4)  # agrees with the log
    args = ["run", "--mode", "replay", "--trace", str(log), "--train-gpus", "9"]
    line = _error_line([*args, "--rollout-gpus", "3"])
    assert "--train-gpus and --rollout-gpus" in line and "12 GPUs" in line
    assert sidecar not in line


def test_a_config_split_that_contradicts_the_log_names_the_config(log, tmp_path):
    from dynaresize.config import resolve_config_path

    scenario = yaml.safe_load(resolve_config_path("example").read_text())
    scenario["cluster"].update(
        gpus_per_node=12, candidate_allocations=["6:6", "8:4"], initial_allocation="6:6"
    )
    scenario["simulation"].pop("baseline_allocation", None)
    config = tmp_path / "twelve.yaml"
    config.write_text(yaml.safe_dump(scenario))
    line = _error_line(["run", "--mode", "replay", "--trace", str(log), "--config", str(config)])
    assert str(log) in line and str(config) in line and "cluster.initial_allocation" in line
