"""Chrome-trace export: valid JSON, the expected tracks, and spans that agree with the records."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from run_records_factory import RESIZES, make_run

from dynaresize.traces.chrome_trace import (
    GPU_PID,
    PIPELINE_PID,
    RESIZE_PID,
    chrome_trace,
    iter_spans,
    write_chrome_trace,
)
from dynaresize.traces.schema import ResizePhaseRecord, StepRecord


@pytest.fixture(scope="module")
def run():
    return make_run()


@pytest.fixture(scope="module")
def trace(run, tmp_path_factory):
    steps, resizes, decisions = run
    path = tmp_path_factory.mktemp("chrome") / "run.trace.json"
    write_chrome_trace(path, steps, resizes, decisions=decisions, run_name="factory run")
    return json.loads(path.read_text())


def _thread_names(trace) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }


def test_trace_is_json_with_the_expected_tracks(trace, run):
    _, resizes, _ = run
    names = _thread_names(trace)
    gpu_tracks = sorted(name for (pid, _), name in names.items() if pid == GPU_PID)
    assert gpu_tracks == sorted(f"GPU {d}" for d in range(8))
    pipeline = {name for (pid, _), name in names.items() if pid == PIPELINE_PID}
    assert pipeline == {"step", "rollout", "train", "sync"}
    resize_tracks = {name for (pid, _), name in names.items() if pid == RESIZE_PID}
    assert resize_tracks == set(resizes["phase"]) | {"policy decisions"}
    processes = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert set(processes) == {GPU_PID, PIPELINE_PID, RESIZE_PID}
    assert trace["otherData"]["run"] == "factory run"


def test_every_event_is_well_formed(trace):
    for event in trace["traceEvents"]:
        assert event["ph"] in {"X", "M", "i"}
        if event["ph"] == "X":
            assert event["dur"] >= 0 and event["ts"] >= 0
            assert isinstance(event["tid"], int)


def test_one_step_span_per_step_with_its_duration(trace, run):
    steps, _, _ = run
    spans = [e for e in iter_spans(trace) if e["pid"] == PIPELINE_PID and e["cat"] == "step"]
    assert len(spans) == len(steps)
    for span, row in zip(spans, steps.itertuples(), strict=True):
        assert span["ts"] == pytest.approx(row.start_s * 1e6)
        assert span["dur"] == pytest.approx(row.step_s * 1e6)
    syncs = [e for e in iter_spans(trace) if e["name"].startswith("sync ")]
    for span, row in zip(syncs, steps.itertuples(), strict=True):
        assert span["ts"] + span["dur"] == pytest.approx(row.end_s * 1e6)


def _role_at(trace, device: int, t_us: float) -> str | None:
    for e in iter_spans(trace):
        mine = e["pid"] == GPU_PID and e["tid"] == device and e["cat"] == "role"
        if mine and e["ts"] <= t_us < e["ts"] + e["dur"]:
            return e["args"]["role"]
    return None


def test_role_tracks_follow_the_device_to_role_map(trace, run):
    steps, _, _ = run
    for row in steps.itertuples():
        middle_us = (row.start_s + row.end_s) / 2 * 1e6
        roles = [_role_at(trace, d, middle_us) for d in range(8)]
        assert roles == list(row.device_roles)
        assert roles.count("train") == row.train_gpus  # GPUs conserved at every step


def test_consecutive_steps_in_one_role_merge_into_one_span(trace, run):
    steps, _, _ = run
    spans = defaultdict(list)
    for e in iter_spans(trace):
        if e["pid"] == GPU_PID and e["cat"] == "role":
            spans[e["tid"]].append(e)
    assert len(spans[0]) == 1  # GPU 0 trains throughout
    assert spans[0][0]["dur"] == pytest.approx(steps["end_s"].iloc[-1] * 1e6)
    # GPU 4 trains, lends itself to rollout at step 10, comes back at step 20
    assert [e["args"]["role"] for e in spans[4]] == ["train", "rollout", "train"]
    assert [e["args"]["first_step"] for e in spans[4]] == [0, 10, 20]


def test_moving_devices_show_a_switch_span_over_the_critical_path(trace, run):
    _, resizes, _ = run
    switches = [e for e in iter_spans(trace) if e["pid"] == GPU_PID and e["cat"] == "resize"]
    assert sorted((e["tid"], e["name"]) for e in switches) == [
        (4, "switch rollout→train"),
        (4, "switch train→rollout"),
        (5, "switch train→rollout"),
    ]
    first = resizes[(resizes.resize_id == 0) & resizes.critical]
    window = next(e for e in switches if e["args"]["resize_id"] == 0)
    assert window["dur"] == pytest.approx((first.end_s.max() - first.start_s.min()) * 1e6)


def test_resize_phases_keep_their_category_and_times(trace, run):
    _, resizes, _ = run
    spans = [e for e in iter_spans(trace) if e["pid"] == RESIZE_PID]
    assert len(spans) == len(resizes)
    for span, row in zip(spans, resizes.itertuples(), strict=True):
        assert span["name"] == row.phase
        assert span["cat"] == ("critical" if row.critical else "background")
        assert span["dur"] == pytest.approx((row.end_s - row.start_s) * 1e6)
    decisions = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert sum(e["name"] == "resize" for e in decisions) == len(RESIZES)


def test_records_and_frames_give_the_same_trace(run):
    steps, resizes, _ = run
    rows = steps.astype(object).where(steps.notna(), None).to_dict(orient="records")
    step_records = [StepRecord(**r) for r in rows]
    resize_records = [ResizePhaseRecord(**r) for r in resizes.to_dict(orient="records")]
    assert chrome_trace(step_records, resize_records) == chrome_trace(steps, resizes)


def test_bad_input_is_refused(run):
    steps, resizes, _ = run
    with pytest.raises(ValueError, match="at least one step"):
        chrome_trace(steps.iloc[0:0])
    broken = resizes.assign(phase="teleport")
    with pytest.raises(ValueError, match="teleport"):
        chrome_trace(steps, broken)


@pytest.mark.parametrize("as_lists", [False, True])
def test_max_steps_shows_the_first_steps_with_their_resizes_and_decisions(run, tmp_path, as_lists):
    steps, resizes, decisions = run
    keep = len(steps) // 2
    last = int(sorted(steps["step"])[keep - 1])
    records = [steps, resizes, decisions]
    if as_lists:
        records = [frame.to_dict(orient="records") for frame in records]
    path = tmp_path / "first.trace.json"
    write_chrome_trace(path, *records[:2], decisions=records[2], run_name="r", max_steps=keep)
    shown = json.loads(path.read_text())
    step_spans = [e for e in iter_spans(shown) if e["cat"] == "step"]
    assert sorted(e["args"]["step"] for e in step_spans) == sorted(steps["step"])[:keep]
    phases = [e for e in iter_spans(shown) if e["pid"] == RESIZE_PID]
    assert len(phases) == int((resizes["step"] <= last).sum())
    marks = [e for e in shown["traceEvents"] if e["ph"] == "i"]
    assert len(marks) == int((decisions["step"] <= last).sum())
    assert (
        shown["otherData"]["run"] == f"r (steps {int(steps['step'].min())}-{last} of {len(steps)})"
    )
    whole = tmp_path / "whole.trace.json"
    write_chrome_trace(
        whole, steps, resizes, decisions=decisions, run_name="r", max_steps=len(steps)
    )
    assert json.loads(whole.read_text())["otherData"]["run"] == "r"
