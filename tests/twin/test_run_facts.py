"""Facts a veRL log lacks come from flags: every trace command takes them, prints what it still
assumed in one block at the top and in its result file, and refuses to assume with --strict."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner
from verl_log_factory import one_step_off_run, write_log

from dynaresize.cli import app

FACT_FLAGS = [
    "--train-gpus",
    "6",
    "--rollout-gpus",
    "2",
    "--model-params-b",
    "7.6",
    "--gpu-memory-gb",
    "96",
    "--link-gbps",
    "400",
]


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    path = tmp_path_factory.mktemp("facts") / "run.jsonl"
    write_log(path, one_step_off_run(24))
    return path


def invoke(args: list[str]):
    return CliRunner().invoke(app, args)


def test_breakeven_lists_every_assumed_fact_first_and_in_its_json(log, tmp_path):
    result = invoke(["breakeven", "--trace", str(log), "--out", str(tmp_path / "b.json")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "assumed (not in the log, flags or config):"
    block = lines[1:5]
    assert any(
        "train:rollout split: 4:4 (give --train-gpus and --rollout-gpus)" in b for b in block
    )
    assert any("model size: 8B parameters (give --model-params-b)" in b for b in block)
    assert any("(give --gpu-memory-gb)" in b for b in block)
    assert any("(give --link-gbps)" in b for b in block)
    assert "trace ran mostly on 4:4" in result.output
    payload = json.loads((tmp_path / "b.json").read_text())
    assumed = {entry["fact"]: entry for entry in payload["assumed"]}
    assert assumed["train:rollout split"]["assumed"] == "4:4"
    assert assumed["model size"]["flag"] == "--model-params-b"


def test_flags_supply_the_facts_and_change_the_answer(log):
    result = invoke(["breakeven", "--trace", str(log), *FACT_FLAGS])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].startswith("assumed: nothing")
    assert "trace ran mostly on 6:2" in result.output
    assert "best move from 6:2" in result.output


def test_strict_refuses_an_assumed_fact_naming_its_flag(log):
    result = invoke(["breakeven", "--trace", str(log), "--strict"])
    assert result.exit_code == 2
    assert "--train-gpus and --rollout-gpus" in result.output
    assert "--model-params-b" in result.output and "--link-gbps" in result.output
    assert invoke(["breakeven", "--trace", str(log), "--strict", *FACT_FLAGS]).exit_code == 0


def test_half_a_split_is_refused(log):
    result = invoke(["breakeven", "--trace", str(log), "--train-gpus", "6"])
    assert result.exit_code == 2 and "--train-gpus needs --rollout-gpus" in result.output


def test_replay_and_calibrate_take_the_same_flags(log, tmp_path):
    out = tmp_path / "replay"
    result = invoke(["run", "--mode", "replay", "--trace", str(log), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("assumed (not in the log, flags or config):")
    payload = json.loads((out / "replay.json").read_text())
    assert {e["fact"] for e in payload["assumed"]} >= {"train:rollout split", "model size"}
    flagged = invoke(["run", "--mode", "replay", "--trace", str(log), *FACT_FLAGS])
    assert flagged.exit_code == 0 and flagged.output.startswith("assumed: nothing")
    assert "static 6:2" in flagged.output
    costs = tmp_path / "costs.yaml"
    calibrated = invoke(["calibrate", "--trace", str(log), "--out", str(costs), "--strict"])
    assert calibrated.exit_code == 2 and "--model-params-b" in calibrated.output
    calibrated = invoke(["calibrate", "--trace", str(log), "--out", str(costs), *FACT_FLAGS])
    assert calibrated.exit_code == 0 and calibrated.output.startswith("assumed: nothing")
    text = costs.read_text()
    assert "# assumed: nothing" in text
    again = invoke(["calibrate", "--trace", str(log), "--out", str(costs)])
    assert again.output.count("model size: 8B") == 1  # each assumption once
    sim = invoke(["run", "--mode", "sim", "--train-gpus", "6", "--rollout-gpus", "2"])
    assert sim.exit_code == 2 and "does nothing with --mode sim" in sim.output
