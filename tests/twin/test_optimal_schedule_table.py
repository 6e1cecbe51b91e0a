"""The offline optimum is written as a schedule (start, then each move after a step) beside the
policies' decisions, by `run --mode sim` and by replay, and the table adds up to its total."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from typer.testing import CliRunner
from verl_log_factory import one_step_off_run, write_log

from dynaresize.cli import app
from dynaresize.policies.types import Allocation
from dynaresize.twin.optimal import offline_optimum, schedule_table

A, B, C = (Allocation.parse(t) for t in ("6:2", "5:3", "4:4"))


def test_schedule_table_by_hand():
    step_s = np.array([[10.0, 30.0, 30.0], [50.0, 30.0, 10.0], [50.0, 30.0, 10.0]])
    resize_s = np.full((3, 3), 5.0)
    optimum = offline_optimum(step_s, resize_s, initial_index=None)
    table = schedule_table(optimum, (A, B, C), steps=np.array([7, 8, 9]), resize_s=resize_s)
    assert table.to_dict(orient="records") == [
        {
            "kind": "start",
            "step": 7,
            "from_allocation": None,
            "to_allocation": "6:2",
            "resize_s": 0.0,
        },
        {
            "kind": "resize",
            "step": 7,
            "from_allocation": "6:2",
            "to_allocation": "4:4",
            "resize_s": 5.0,
        },
    ]
    assert optimum.total_s == 10.0 + 5.0 + 10.0 + 10.0


def test_sim_and_replay_write_the_optimal_schedule_beside_the_decisions(tmp_path):
    out = tmp_path / "sim"
    args = ["run", "--mode", "sim", "--config", "example", "--steps", "60", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "optimal_schedule.csv")
    summary = json.loads((out / "summary.json").read_text())["offline_optimal"]
    assert table["kind"].iloc[0] == "start" and summary["start"] == table["to_allocation"].iloc[0]
    assert (table["kind"] == "resize").sum() == summary["num_resizes"]
    assert np.isclose(table["resize_s"].sum(), summary["resize_s"])
    assert len(summary["schedule"]) == len(table)
    moves = table[table["kind"] == "resize"]
    assert (moves["from_allocation"] != moves["to_allocation"]).all()

    log = tmp_path / "run.jsonl"
    write_log(log, one_step_off_run(20))
    replay = tmp_path / "replay"
    args = ["run", "--mode", "replay", "--trace", str(log), "--out", str(replay)]
    args += [
        "--train-gpus",
        "6",
        "--rollout-gpus",
        "2",
        "--policy",
        "hysteresis",
        "--policy",
        "greedy",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    decisions = pd.read_csv(replay / "decisions.csv")
    assert decisions.columns[0] == "run" and set(decisions["run"]) == {"hysteresis", "greedy"}
    schedule = pd.read_csv(replay / "optimal_schedule.csv")
    assert schedule["kind"].iloc[0] == "start" and schedule["step"].iloc[0] == 0
