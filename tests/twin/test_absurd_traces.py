"""Traces with absurd but finite values are refused at once, in one line naming the step and
field, before anything is allocated for them; the per-sample lengths of a long log are made in
blocks, equal to the one-step reconstruction."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_factory import small_trace
from typer.testing import CliRunner
from verl_log_factory import one_step_off_run, write_log

from dynaresize.cli import app
from dynaresize.traces.io import write_trace
from dynaresize.traces.workload_inference import infer_workload, lognormal_lengths


def _native(tmp_path, **columns):
    """A JSONL trace whose step records hold `columns`, written past the writer's own checks
    (which refuse such values) as a hand-edited or foreign file would be."""
    trace = small_trace(6)
    trace.samples = trace.samples.iloc[0:0]
    path = tmp_path / "trace.jsonl"
    write_trace(path, trace)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        if record.get("record") == "step":
            record.update(columns)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_every_duration_1e308_is_one_error_line_in_replay_and_calibrate(tmp_path):
    huge = {name: 1e308 for name in ("rollout_s", "train_s", "sync_s", "step_s")}
    path = _native(tmp_path, **huge)
    for args in (
        ["run", "--mode", "replay", "--trace", str(path), "--out", str(tmp_path / "r")],
        ["calibrate", "--trace", str(path), "--out", str(tmp_path / "c.yaml")],
    ):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "line 2, field 'rollout_s'" in lines[0] and "1e+308" in lines[0]
    assert not (tmp_path / "r").exists() and not (tmp_path / "c.yaml").exists()


def test_a_sample_count_beyond_memory_is_refused_before_it_is_allocated(tmp_path):
    path = _native(tmp_path, num_samples=10**12)
    result = CliRunner().invoke(app, ["run", "--mode", "replay", "--trace", str(path)])
    assert result.exit_code == 2 and "more than a replay can hold" in result.output


def test_an_absurd_veRL_timer_names_its_line(tmp_path):
    lines = one_step_off_run(4)
    lines[2]["data"]["timing_s/update_actor"] = 1e300
    write_log(tmp_path / "run.jsonl", lines)
    result = CliRunner().invoke(app, ["breakeven", "--trace", str(tmp_path / "run.jsonl")])
    assert result.exit_code == 2
    assert "line 3, field 'timing_s/update_actor': 1e+300 s is beyond any run" in result.output


@settings(max_examples=40, deadline=None)
@given(
    stats=st.lists(
        st.tuples(
            st.sampled_from([0, 1, 2, 7, 64]),
            st.floats(0.0, 5000.0),
            st.floats(0.0, 20000.0),
            st.integers(0, 10**6),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_lengths_made_in_blocks_equal_the_one_step_reconstruction(stats):
    steps = pd.DataFrame(
        {
            "step": np.arange(len(stats)),
            "num_samples": [s[0] for s in stats],
            "response_len_mean": [s[1] for s in stats],
            "response_len_max": [s[2] for s in stats],
            "tokens": [s[3] for s in stats],
        }
    )
    workload = infer_workload(steps, pd.DataFrame(), name="t").workload
    for k, (n, mean, longest, tokens) in enumerate(stats):
        expected = lognormal_lengths(num_samples=n, mean=mean, longest=longest)
        prompts, responses = workload.step(k)
        np.testing.assert_array_equal(responses, expected)
        prompt_each = max(0, round((tokens - int(expected.sum())) / n)) if n else 0
        assert (prompts == prompt_each).all()
