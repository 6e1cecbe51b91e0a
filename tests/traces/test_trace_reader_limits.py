"""Trace readers on what a schema check alone lets through: bytes that are not UTF-8, gaps in
the step numbering, samples of steps the trace lacks, absurd magnitudes, empty steps; and JSON
outputs that stay JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from trace_factory import small_trace

from dynaresize.traces.errors import TraceError
from dynaresize.traces.io import Trace, read_trace, write_trace
from dynaresize.traces.jsonl_io import dumps_finite
from dynaresize.traces.validation import MAX_TRACE_SECONDS


def _jsonl(tmp_path, trace: Trace | None = None) -> list[bytes]:
    path = tmp_path / "source.jsonl"
    write_trace(path, trace or small_trace())
    return path.read_bytes().splitlines()


def _write(tmp_path, lines: list[bytes], name="t.jsonl"):
    path = tmp_path / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _line_of(lines: list[bytes], tag: str, nth: int = 0) -> int:
    matches = [
        i for i, line in enumerate(lines) if line.startswith(b'{"record":"%s"' % tag.encode())
    ]
    return matches[nth]


@pytest.mark.parametrize("tag", ["step", "decision", "sample"])
def test_bytes_that_are_not_utf8_name_the_line(tmp_path, tag):
    """Arrow's bulk parser takes such bytes and fails later, out of the reader's hands."""
    trace = small_trace()
    lines = _jsonl(tmp_path, trace)
    at = _line_of(lines, tag, 1)
    # Inside a text value of the record (or its tag's own key for steps, which have no text).
    lines[at] = (
        lines[at].replace(b'","', b'\xff\xfe","', 1)
        if tag != "step"
        else (lines[at].replace(b'"tokens"', b'"tok\xffens"', 1))
    )
    path = _write(tmp_path, lines)
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert caught.value.line == at + 1 and "not UTF-8" in str(caught.value)
    lenient = read_trace(path, lenient=True)
    assert [s.where for s in lenient.skipped] == [f"line {at + 1}"]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_steps_must_follow_each_other(tmp_path, fmt):
    trace = small_trace()
    steps = trace.steps.copy()
    steps["step"] = steps["step"] * 3  # 0, 3, 6, ...
    trace.steps = steps
    trace.samples = trace.samples.assign(step=trace.samples["step"] * 3)
    path = tmp_path / ("t.jsonl" if fmt == "jsonl" else "t")
    write_trace(path, trace)
    with pytest.raises(TraceError, match="steps are not consecutive: step 3 follows step 0") as e:
        read_trace(path)
    assert e.value.field == "step"
    assert (e.value.line if fmt == "jsonl" else e.value.row) is not None
    lenient = read_trace(path, lenient=True)
    assert list(lenient.steps["step"]) == [0, 3, 6, 9, 12, 15]
    assert any("not consecutive" in note for note in lenient.meta.notes)


def test_steps_may_start_past_zero(tmp_path):
    """A log of a resumed job starts where it resumed; only gaps are refused."""
    trace = small_trace()
    trace.steps = trace.steps.assign(step=trace.steps["step"] + 40)
    trace.samples = trace.samples.assign(step=trace.samples["step"] + 40)
    write_trace(tmp_path / "t.jsonl", trace)
    assert list(read_trace(tmp_path / "t.jsonl").steps["step"]) == list(range(40, 46))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_sample_of_a_step_the_trace_lacks_is_not_ignored(tmp_path, fmt):
    trace = small_trace()
    samples = trace.samples.copy()
    samples.loc[samples.index[-1], "step"] = 99
    trace.samples = samples
    path = tmp_path / ("t.jsonl" if fmt == "jsonl" else "t")
    write_trace(path, trace)
    with pytest.raises(TraceError, match="sample of step 99, which has no step record") as e:
        read_trace(path)
    assert e.value.field == "step"
    if fmt == "jsonl":
        lines = path.read_bytes().splitlines()
        assert b'"step":99' in lines[e.value.line - 1]
    else:
        assert e.value.source.endswith("samples.parquet") and e.value.row == len(samples) - 1
    lenient = read_trace(path, lenient=True)
    assert 99 not in set(lenient.samples["step"]) and len(lenient.samples) == len(samples) - 1
    assert any("1 samples of 1 step(s) without a step record" in n for n in lenient.meta.notes)


@pytest.mark.parametrize(
    ("field", "raw", "words"),
    [
        ("step_s", b"1e308", ["step_s", "at most 1e+12 s"]),
        ("end_s", b"1e300", ["end_s", "at most 1e+12 s"]),
        ("tokens", b"1" + b"0" * 400, ["tokens", "finite"]),
        ("tokens", b"1e400", ["tokens", "finite"]),
        ("num_samples", b"18014398509481984", ["num_samples", "2**53"]),
    ],
)
def test_absurd_magnitudes_are_refused_naming_line_and_field(tmp_path, field, raw, words):
    lines = _jsonl(tmp_path)
    at = _line_of(lines, "step", 2)
    obj = json.loads(lines[at])
    token = f'"{field}":{json.dumps(obj[field])}'.encode()
    assert token in lines[at]
    lines[at] = lines[at].replace(token, f'"{field}":'.encode() + raw)
    with pytest.raises(TraceError) as caught:
        read_trace(_write(tmp_path, lines))
    assert caught.value.line == at + 1 and caught.value.field == field
    for word in words:
        assert word in str(caught.value)


def test_the_largest_accepted_time_keeps_every_sum_finite(tmp_path):
    trace = small_trace()
    trace.steps = trace.steps.assign(
        step_s=MAX_TRACE_SECONDS / 10,
        start_s=np.arange(6) * MAX_TRACE_SECONDS / 10,
        end_s=(np.arange(6) + 1) * MAX_TRACE_SECONDS / 10,
    )
    write_trace(tmp_path / "t.jsonl", trace)
    back = read_trace(tmp_path / "t.jsonl")
    assert math.isfinite(back.steps["step_s"].sum() ** 2)


def test_steps_with_no_tokens_are_noted(tmp_path):
    trace = small_trace()
    steps = trace.steps.copy()
    steps.loc[2, ["tokens", "num_samples"]] = 0
    trace.steps = steps
    trace.samples = trace.samples[trace.samples["step"] != 2].reset_index(drop=True)
    notes = trace.workload_notes()
    assert any("1 of 6 steps record 0 tokens or 0 samples (first: step 2)" in n for n in notes)
    assert len(trace.to_workload().step(2)[0]) == 0


def test_json_outputs_never_hold_nan_or_infinity():
    text = dumps_finite({"a": math.nan, "b": [math.inf, 1.5, np.float64(-math.inf)], "c": "x"})

    def refuse(constant):
        raise ValueError(constant)

    assert json.loads(text, parse_constant=refuse) == {"a": None, "b": [None, 1.5, None], "c": "x"}
