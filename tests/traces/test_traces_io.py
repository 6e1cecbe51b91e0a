"""Trace files: round trips through Parquet and JSONL, validation, lenient reading, atomic writes,
the append-only JSONL writer and the conversion to a Workload."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_factory import small_trace, step_record

from dynaresize.traces.errors import TraceError
from dynaresize.traces.io import TABLES, JsonlTraceWriter, Trace, read_trace, write_trace
from dynaresize.traces.schema import RunMeta, StepRecord
from dynaresize.traces.validation import validate_steps_frame


def assert_same_trace(a: Trace, b: Trace) -> None:
    for table in TABLES:
        pd.testing.assert_frame_equal(a.table(table), b.table(table), check_exact=True)
    assert a.meta.model_dump(exclude={"source_path"}) == b.meta.model_dump(exclude={"source_path"})


@pytest.mark.parametrize("name", ["run", "run.jsonl"])
def test_round_trip_every_table(tmp_path, name):
    trace = small_trace()
    write_trace(tmp_path / name, trace)
    back = read_trace(tmp_path / name)
    assert_same_trace(trace, back)
    assert back.skipped == []
    assert back.steps["resize_id"].isna().sum() == len(back.steps) - 1
    assert back.samples["finish_s"].isna().any() and back.samples["finish_s"].notna().any()


def test_jsonl_to_parquet_to_jsonl_is_identical_text(tmp_path):
    write_trace(tmp_path / "a.jsonl", small_trace())
    write_trace(tmp_path / "dir", read_trace(tmp_path / "a.jsonl"))
    write_trace(tmp_path / "b.jsonl", read_trace(tmp_path / "dir"))
    a = (tmp_path / "a.jsonl").read_text().splitlines()
    b = (tmp_path / "b.jsonl").read_text().splitlines()
    assert a[1:] == b[1:]  # identical records; meta differs only in source_path


def test_single_steps_parquet_file_is_readable(tmp_path):
    write_trace(tmp_path / "dir", small_trace())
    back = read_trace(tmp_path / "dir" / "steps.parquet")
    pd.testing.assert_frame_equal(back.steps, small_trace().steps)
    assert back.resizes.empty and back.meta.notes


finite_times = st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False)


@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(durations=st.lists(finite_times, min_size=1, max_size=8), tokens=st.integers(0, 2**53))
def test_any_valid_numbers_survive_both_formats_exactly(tmp_path, durations, tokens):
    records, t = [], 0.0
    for k, d in enumerate(durations):
        records.append(
            step_record(k, start_s=t, step_s=d, end_s=t + d, rollout_s=d / 3, tokens=tokens)
        )
        t += d
    trace = Trace.from_records(RunMeta(), records)
    for name in ["h", "h.jsonl"]:
        write_trace(tmp_path / name, trace)
        assert_same_trace(trace, read_trace(tmp_path / name))


# --- bad JSONL --------------------------------------------------------------------------------


def jsonl_lines(trace: Trace | None = None) -> list[dict]:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.jsonl")
        write_trace(path, trace or small_trace())
        with open(path) as f:
            return [json.loads(line) for line in f]


def write_lines(path, objs_or_text) -> None:
    with open(path, "w") as f:
        for item in objs_or_text:
            f.write((item if isinstance(item, str) else json.dumps(item)) + "\n")


def first_step_line(lines: list[dict]) -> int:
    return next(i for i, obj in enumerate(lines) if obj["record"] == "step")


def set_step_field(lines, k, field, value):
    idx = [i for i, o in enumerate(lines) if o["record"] == "step"][k]
    lines[idx][field] = value
    return idx + 1  # 1-based line number


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("tokens", "many", "expected an integer, got str"),
        ("train_s", "6.5", "expected a number, got str"),
        ("step_s", -1.0, "must be >= 0"),
        ("start_s", float("nan"), "is NaN"),
        ("end_s", float("inf"), "must be finite"),
        ("train_gpus", 2.5, "expected an integer"),
        ("device_roles", ["train", "gpu"], "list of roles"),
        ("critical_path", 1, "unknown field"),
    ],
)
def test_jsonl_bad_value_names_line_and_field(tmp_path, field, value, needle):
    lines = jsonl_lines()
    line_no = set_step_field(lines, 2, field, value)
    path = tmp_path / "bad.jsonl"
    write_lines(path, [json.dumps(o) for o in lines])  # json.dumps writes NaN/Infinity literals
    with pytest.raises(TraceError) as err:
        read_trace(path)
    message = str(err.value)
    assert f"line {line_no}" in message and f"'{field}'" in message and needle in message
    assert str(path) in message
    assert err.value.line == line_no and err.value.field == field


def test_jsonl_missing_required_field(tmp_path):
    lines = jsonl_lines()
    idx = first_step_line(lines) + 1
    del lines[idx]["rollout_s"]
    write_lines(tmp_path / "m.jsonl", lines)
    with pytest.raises(TraceError, match=rf"line {idx + 1}, field 'rollout_s': missing"):
        read_trace(tmp_path / "m.jsonl")


def test_jsonl_malformed_line(tmp_path):
    lines = [json.dumps(o) for o in jsonl_lines()]
    lines[3] = lines[3][: len(lines[3]) // 2]
    write_lines(tmp_path / "x.jsonl", lines)
    with pytest.raises(TraceError, match=r"line 4: malformed JSON"):
        read_trace(tmp_path / "x.jsonl")


def test_jsonl_steps_out_of_order(tmp_path):
    lines = jsonl_lines()
    steps = [i for i, o in enumerate(lines) if o["record"] == "step"]
    lines[steps[3]]["step"] = 1
    write_lines(tmp_path / "o.jsonl", lines)
    with pytest.raises(TraceError, match=rf"line {steps[3] + 1}, field 'step': steps out of order"):
        read_trace(tmp_path / "o.jsonl")


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file(tmp_path, content):
    (tmp_path / "e.jsonl").write_text(content)
    with pytest.raises(TraceError, match="empty file"):
        read_trace(tmp_path / "e.jsonl")


def test_unknown_record_and_end_before_start(tmp_path):
    lines = jsonl_lines()
    lines.append({"record": "gpu", "x": 1})
    write_lines(tmp_path / "u.jsonl", lines)
    with pytest.raises(TraceError, match=rf"line {len(lines)}, field 'record': unknown record"):
        read_trace(tmp_path / "u.jsonl")
    lines = jsonl_lines()
    line_no = set_step_field(lines, 1, "end_s", 0.5)
    write_lines(tmp_path / "s.jsonl", lines)
    with pytest.raises(TraceError, match=rf"line {line_no}, field 'end_s': end_s 0.5 is before"):
        read_trace(tmp_path / "s.jsonl")


def test_lenient_skips_bad_rows_and_counts_them(tmp_path):
    lines = [json.dumps(o, separators=(",", ":")) for o in jsonl_lines(small_trace(10))]
    steps = [i for i, text in enumerate(lines) if '"record":"step"' in text]
    lines[steps[1]] = lines[steps[1]].replace('"tokens":4017', '"tokens":"x"')
    lines[steps[4]] = lines[steps[4]][:40]  # a line cut mid-write
    obj = json.loads(lines[steps[7]])
    obj["step"] = 2  # goes backwards
    lines[steps[7]] = json.dumps(obj)
    write_lines(tmp_path / "l.jsonl", lines)
    trace = read_trace(tmp_path / "l.jsonl", lenient=True)
    assert list(trace.steps["step"]) == [0, 2, 3, 5, 6, 8, 9]
    assert len(trace.skipped) == 3
    reasons = {s.where: (s.field, s.reason) for s in trace.skipped}
    assert reasons[f"line {steps[1] + 1}"][0] == "tokens"
    assert "malformed JSON" in reasons[f"line {steps[4] + 1}"][1]
    assert "out of order" in reasons[f"line {steps[7] + 1}"][1]
    assert trace.skipped_summary().startswith("3 rows skipped")


def test_lenient_with_nothing_valid_left_still_fails(tmp_path):
    write_lines(tmp_path / "n.jsonl", ["{not json", "[1, 2]"])
    with pytest.raises(TraceError, match="no valid step records"):
        read_trace(tmp_path / "n.jsonl", lenient=True)


# --- bad Parquet ------------------------------------------------------------------------------


def test_truncated_parquet(tmp_path):
    write_trace(tmp_path / "d", small_trace())
    f = tmp_path / "d" / "steps.parquet"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(TraceError, match=r"steps\.parquet: not a readable Parquet file"):
        read_trace(tmp_path / "d")


def rewrite_steps(tmp_path, mutate) -> str:
    write_trace(tmp_path / "d", small_trace())
    f = tmp_path / "d" / "steps.parquet"
    df = pq.read_table(f).to_pandas()
    mutate(df)
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), f)
    return str(f)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda df: df.__setitem__("sync_s", [1.0, 1, 1, np.nan, 1, 1]), "row 3, field 'sync_s'"),
        (lambda df: df.__setitem__("start_s", [0.0, -2, 0, 0, 0, 0]), "row 1, field 'start_s'"),
        (lambda df: df.__setitem__("tokens", ["1"] * 6), "row 0, field 'tokens'"),
        (lambda df: df.__setitem__("step", [0, 1, 2, 2, 4, 5]), "row 3, field 'step': steps out"),
        (lambda df: df.pop("train_s"), "field 'train_s'"),
    ],
)
def test_bad_parquet_values_name_row_and_field(tmp_path, mutate, needle):
    source = rewrite_steps(tmp_path, mutate)
    with pytest.raises(TraceError) as err:
        read_trace(tmp_path / "d")
    assert needle in str(err.value) and source in str(err.value)


def test_parquet_binary_columns_are_refused_not_decoded(tmp_path):
    import pickle

    blob = pickle.dumps({"x": 1})
    source = rewrite_steps(tmp_path, lambda df: df.__setitem__("rollout_s", [blob] * 6))
    with pytest.raises(TraceError, match=rf"{source}, field 'rollout_s': column type binary"):
        read_trace(tmp_path / "d")


def test_lenient_parquet_drops_rows(tmp_path):
    rewrite_steps(tmp_path, lambda df: df.__setitem__("sync_s", [1.0, np.inf, 1, np.nan, 1, 1]))
    trace = read_trace(tmp_path / "d", lenient=True)
    assert list(trace.steps["step"]) == [0, 2, 4, 5]
    assert [s.where for s in trace.skipped] == ["row 1", "row 3"]


# --- writing safely ---------------------------------------------------------------------------


def test_invalid_trace_is_not_written_and_old_one_survives(tmp_path):
    good = small_trace()
    for name in ["d", "t.jsonl"]:
        write_trace(tmp_path / name, good)
        bad = small_trace()
        bad.steps.loc[2, "train_s"] = -1.0
        with pytest.raises(TraceError, match="row 2, field 'train_s'"):
            write_trace(tmp_path / name, bad)
        assert_same_trace(good, read_trace(tmp_path / name))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "t.jsonl"]


def test_crash_mid_write_keeps_old_directory(tmp_path, monkeypatch):
    good = small_trace()
    write_trace(tmp_path / "d", good)
    calls = []

    def failing_write(table, where):
        calls.append(where)
        if len(calls) == 3:
            raise OSError("disk full")
        return real(table, where)

    real = pq.write_table
    monkeypatch.setattr(pq, "write_table", failing_write)
    with pytest.raises(OSError, match="disk full"):
        write_trace(tmp_path / "d", small_trace(3))
    monkeypatch.undo()
    assert_same_trace(good, read_trace(tmp_path / "d"))
    assert [p.name for p in tmp_path.iterdir()] == ["d"]


# --- append-only writer -----------------------------------------------------------------------


def test_jsonl_writer_appends_readable_lines_and_converts(tmp_path):
    trace = small_trace()
    path = tmp_path / "live.jsonl"
    with JsonlTraceWriter(path, meta=trace.meta) as writer:
        for rec in trace.steps.to_dict("records")[:3]:
            rec["resize_id"] = None if pd.isna(rec["resize_id"]) else int(rec["resize_id"])
            writer.write(StepRecord(**rec))
            # every record is on disk as soon as write returns: another reader sees it
            assert len(read_trace(path).steps) == rec["step"] + 1
        with pytest.raises(TraceError, match="steps out of order"):
            writer.write(StepRecord(**{**rec, "step": 1}))
    out = JsonlTraceWriter(path).finish(tmp_path / "live")
    back = read_trace(out)
    pd.testing.assert_frame_equal(back.steps, trace.steps.iloc[:3])
    assert back.meta.pipeline_mode == trace.meta.pipeline_mode


def test_jsonl_writer_cut_last_line_strict_and_lenient(tmp_path):
    path = tmp_path / "live.jsonl"
    with JsonlTraceWriter(path) as writer:
        for k in range(4):
            writer.write(step_record(k, start_s=20.0 * k))
    with open(path, "a") as f:
        f.write('{"record":"step","step":4,"start_')  # killed mid-line
    with pytest.raises(TraceError, match="line 6: malformed JSON"):
        read_trace(path)
    trace = read_trace(path, lenient=True)
    assert len(trace.steps) == 4 and len(trace.skipped) == 1


# --- fast column validation and workloads -----------------------------------------------------


def test_validate_steps_frame_finds_the_one_bad_row_in_a_big_frame():
    base = small_trace(1).steps
    df = base.loc[np.zeros(50_000, dtype=int)].reset_index(drop=True)
    df["step"] = np.arange(len(df))
    df["start_s"] = df["step"] * 20.0
    df["end_s"] = df["start_s"] + df["step_s"]
    out = validate_steps_frame(df)
    assert len(out) == len(df)
    df.loc[41_234, "idle_rollout_gpu_s"] = -0.5
    with pytest.raises(TraceError, match="row 41234, field 'idle_rollout_gpu_s'"):
        validate_steps_frame(df)


def test_workload_from_recorded_samples_is_exact():
    trace = small_trace()
    workload = trace.to_workload()
    assert trace.workload_notes() == []
    assert workload.num_steps == len(trace.steps)
    prompts, responses = workload.step(3)
    assert list(prompts) == [100, 101, 102, 103]
    assert list(responses) == [303, 603, 903, 1203]


def test_workload_without_samples_says_what_it_inferred():
    trace = small_trace()
    trace.samples = trace.samples.iloc[0:0]
    notes = trace.workload_notes()
    assert len(notes) == 1 and "lognormal" in notes[0] and "6 of 6" in notes[0]
    workload = trace.to_workload()
    for k in range(workload.num_steps):
        prompts, responses = workload.step(k)
        assert len(responses) == 4
        assert math.isclose(responses.mean(), 800.5, rel_tol=0.01)
        assert responses.max() <= 2000
        assert abs(prompts.sum() + responses.sum() - trace.steps["tokens"][k]) <= 4


def test_schema_doc_lists_every_field():
    from pathlib import Path

    from dynaresize.traces.schema import RunMeta

    doc = (Path(__file__).resolve().parents[2] / "docs" / "trace-schema.md").read_text()
    for model in [*TABLES.values(), RunMeta]:
        for name in model.model_fields:
            assert f"| `{name}` |" in doc, f"{model.__name__}.{name} is not documented"


def test_jsonl_writer_resumes_after_a_crash(tmp_path):
    path = tmp_path / "live.jsonl"
    with JsonlTraceWriter(path, meta=RunMeta(source="executor")) as writer:
        for k in range(3):
            writer.write(step_record(k, start_s=20.0 * k))
    with open(path, "a") as f:
        f.write('{"record":"step","step":3,"sta')  # killed mid-line
    with JsonlTraceWriter(path) as writer:  # the run resumes appending to the same file
        with pytest.raises(TraceError, match="step 2 after step 2"):
            writer.write(step_record(2, start_s=40.0))
        writer.write(step_record(3, start_s=60.0))
    trace = read_trace(path, lenient=True)
    assert list(trace.steps["step"]) == [0, 1, 2, 3]
    assert len(trace.skipped) == 1 and trace.meta.source == "executor"


def test_bulk_and_line_by_line_jsonl_reading_agree(tmp_path):
    trace = small_trace()
    write_trace(tmp_path / "canonical.jsonl", trace)  # parsed in bulk
    objs = [json.loads(line) for line in (tmp_path / "canonical.jsonl").read_text().splitlines()]
    write_lines(tmp_path / "spaced.jsonl", objs)  # json.dumps' spacing: parsed line by line
    mixed = [
        json.dumps(o, separators=(",", ":")) if i % 2 else json.dumps(o) for i, o in enumerate(objs)
    ]
    write_lines(tmp_path / "mixed.jsonl", mixed)
    for name in ["canonical.jsonl", "spaced.jsonl", "mixed.jsonl"]:
        assert_same_trace(trace, read_trace(tmp_path / name))


@pytest.mark.parametrize(
    ("old", "new", "field", "needle"),
    [
        ('"train_s":6.5', '"train_s":-6.5', "train_s", "must be >= 0"),
        ('"train_s":6.5,', "", "train_s", "missing (required)"),
        ('"tokens":4034', '"tokens":4034.5', "tokens", "expected an integer"),
    ],
)
def test_canonical_lines_with_bad_values_are_reported_like_any_other(
    tmp_path, old, new, field, needle
):
    write_trace(tmp_path / "t.jsonl", small_trace())
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    target = next(i for i, line in enumerate(lines) if '"step":2,' in line and old in line)
    lines[target] = lines[target].replace(old, new)
    write_lines(tmp_path / "t.jsonl", lines)
    with pytest.raises(TraceError) as err:
        read_trace(tmp_path / "t.jsonl")
    assert f"line {target + 1}, field '{field}': {needle}" in str(err.value)
    lenient = read_trace(tmp_path / "t.jsonl", lenient=True)
    assert list(lenient.steps["step"]) == [0, 1, 3, 4, 5] and len(lenient.skipped) == 1


def test_jsonl_writer_text_is_what_json_dumps_writes(tmp_path):
    write_trace(tmp_path / "a.jsonl", small_trace())
    for line in (tmp_path / "a.jsonl").read_text().splitlines():
        assert json.dumps(json.loads(line), separators=(",", ":"), allow_nan=False) == line
