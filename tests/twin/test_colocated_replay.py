"""A colocated run (veRL's default) is reported as colocated: its own baseline row with no regret
against an optimum over disaggregated schedules it never was, what-ifs that start from a split the
user gives or that the analysis states, and an optimum never slower than a schedule it could
have chosen."""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner
from verl_log_factory import colocated_run, write_log

from dynaresize.cli import app
from dynaresize.twin.analysis import run_replay
from dynaresize.twin.optimal import offline_optimum, schedule_total_s
from dynaresize.twin.run_facts import RunFacts


def _log(tmp_path):
    path = tmp_path / "colocated.jsonl"
    write_log(path, colocated_run(30))
    return path


def test_colocated_run_is_its_own_baseline_without_regret(tmp_path):
    result = run_replay(trace=_log(tmp_path), out_dir=tmp_path / "out")
    table = result.table.set_index("name")
    assert list(result.table["name"][:2]) == [
        "recorded colocated (measured)",
        "recorded colocated (twin)",
    ]
    for name in ("recorded colocated (measured)", "recorded colocated (twin)"):
        assert math.isnan(table.loc[name, "regret_s"])
    others = result.table[result.table["kind"] != "recorded"]
    assert (others["regret_s"] >= 0).all()
    assert not any(str(n).startswith("static 4:4") and "from" in n for n in table.index)
    (start,) = [f for f in result.assumed if f.name.startswith("disaggregated start split")]
    assert start.value.split(",")[0] in {
        c.split()[1] for c in table.index if c.startswith("static")
    }
    payload = json.loads(
        (tmp_path / "out" / "replay.json").read_text(),
        parse_constant=lambda c: (_ for _ in ()).throw(AssertionError(f"{c} in replay.json")),
    )
    assert payload["table"][0]["regret_s"] is None


def test_a_given_split_is_where_the_what_ifs_start(tmp_path):
    result = run_replay(trace=_log(tmp_path), facts=RunFacts(train_gpus=4, rollout_gpus=4))
    assert not [f for f in result.assumed if f.name.startswith("disaggregated start")]
    hysteresis = next(iter(result.policies.values()))
    assert (hysteresis.steps["train_gpus"].iloc[0], hysteresis.steps["rollout_gpus"].iloc[0]) == (
        4,
        4,
    )


def test_breakeven_says_the_run_was_colocated(tmp_path):
    output = CliRunner().invoke(app, ["breakeven", "--trace", str(_log(tmp_path))]).output
    assert "trace ran colocated on 8 GPUs" in output
    assert "trace ran mostly on" not in output


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    num_steps=st.integers(1, 12),
    num_candidates=st.integers(1, 4),
    free_start=st.booleans(),
)
def test_the_optimum_is_never_slower_than_a_schedule_it_could_choose(
    seed, num_steps, num_candidates, free_start
):
    rng = np.random.default_rng(seed)
    step_s = rng.uniform(1.0, 50.0, (num_steps, num_candidates))
    resize_s = rng.uniform(0.0, 80.0, (num_candidates, num_candidates))
    initial = None if free_start else int(rng.integers(num_candidates))
    optimum = offline_optimum(step_s, resize_s, initial_index=initial)
    for _ in range(20):
        path = rng.integers(num_candidates, size=num_steps)
        start = int(path[0]) if initial is None else initial
        if initial is not None:
            path[0] = initial  # like a policy, the schedule keeps the start for step 0
        total = schedule_total_s(step_s, resize_s, initial_index=start, path=path)
        assert optimum.total_s <= total + 1e-9 * max(1.0, total)
    if initial is None:
        assert optimum.total_s <= step_s.sum(axis=0).min() + 1e-9
