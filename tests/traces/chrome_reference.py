"""The Chrome-trace builder as it was before events were built column-wise: one dict per event.

Kept as the reference the columnar builder (`dynaresize.traces.chrome_trace`) must match, event
for event, on the runs the tests cover. The track constants and metadata events, which the
columnar builder did not change, come from the package.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dynaresize.traces.chrome_tracks import LANE_TID_STRIDE, NESTING_TOLERANCE_US, track_metadata
from dynaresize.traces.phases import PhaseName, PipelineMode
from dynaresize.traces.rows import record_rows


def _lanes(spans: list[dict]) -> list[int]:
    """Lane of each span (0 = the track itself) such that no two spans of a lane overlap.

    Every span of this trace is work of its own, never a part of another, so a track holds a
    sequence: a span goes to the first lane whose last span has ended by its start (spans taken
    by start), else to a new lane. Disjoint spans nest trivially.
    """
    order = sorted(range(len(spans)), key=lambda i: (spans[i]["ts"], -spans[i]["dur"]))
    lane_ends: list[float] = []
    lanes = [0] * len(spans)
    for i in order:
        start = spans[i]["ts"]
        end = start + spans[i]["dur"]
        free = [
            j for j, lane_end in enumerate(lane_ends) if lane_end <= start + NESTING_TOLERANCE_US
        ]
        lane = free[0] if free else len(lane_ends)
        if not free:
            lane_ends.append(end)
        lane_ends[lane] = end
        lanes[i] = lane
    return lanes


def nest_tracks(events: list[dict]) -> list[dict]:
    """Move the spans that would break a track's nesting onto extra tracks of the same name."""
    names: dict[tuple[int, int], tuple[str, int]] = {}
    for e in events:
        if e["ph"] == "M" and e["name"] == "thread_name":
            names[(e["pid"], e["tid"])] = (e["args"]["name"], 0)
        elif e["ph"] == "M" and e["name"] == "thread_sort_index":
            name, _ = names.get((e["pid"], e["tid"]), ("", 0))
            names[(e["pid"], e["tid"])] = (name, e["args"]["sort_index"])
    tracks: dict[tuple[int, int], list[dict]] = {}
    for e in events:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    extra: list[dict] = []
    for (pid, tid), spans in tracks.items():
        lanes = _lanes(spans)
        for span, lane in zip(spans, lanes, strict=True):
            span["tid"] = tid + LANE_TID_STRIDE * lane
        name, sort_index = names.get((pid, tid), (str(tid), tid))
        for lane in range(1, max(lanes) + 1):
            extra += track_metadata(
                pid, tid + LANE_TID_STRIDE * lane, f"{name} ({lane + 1})", sort_index
            )
    return events + extra


MICROSECONDS_PER_S = 1_000_000.0
GPU_PID = 1
PIPELINE_PID = 2
RESIZE_PID = 3
STAGE_TRACKS = {"step": 0, "rollout": 1, "train": 2, "sync": 3}
DECISION_TID = len(PhaseName)


def _text(value: Any) -> str:
    return str(getattr(value, "value", value))


def _us(seconds: float) -> float:
    return round(float(seconds) * MICROSECONDS_PER_S, 3)


def _span(
    name: str, *, pid: int, tid: int, start_s: float, end_s: float, cat: str, args: dict
) -> dict[str, Any]:
    # Both ends on the rounded clock, so that a span ending where the next begins touches it
    # exactly instead of overlapping it by a rounding error.
    start_us = _us(start_s)
    return {
        "name": name,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": start_us,
        "dur": round(max(0.0, _us(end_s) - start_us), 3),
        "cat": cat,
        "args": args,
    }


def _roles(step: Mapping[str, Any]) -> list[str]:
    roles = step.get("device_roles")
    if roles is None:
        raise ValueError(f"step {step.get('step')} has no device_roles")
    return [_text(r) for r in list(roles)]


def _device_role_events(steps: list[dict], resize_windows: dict[int, tuple]) -> list[dict]:
    """Merge consecutive steps in which a device keeps its role into one span per device."""
    events: list[dict] = []
    roles_of_step = [_roles(s) for s in steps]
    num_devices = max(len(roles) for roles in roles_of_step)
    for device in range(num_devices):
        events += track_metadata(GPU_PID, device, f"GPU {device}", device)
        current: tuple[str, float, float, int] | None = None
        previous_role: str | None = None
        for step, roles in zip(steps, roles_of_step, strict=True):
            role = roles[device] if device < len(roles) else None
            resize_id = _optional_int(step.get("resize_id"))
            if resize_id is not None and previous_role is not None and role != previous_role:
                window = resize_windows.get(resize_id)
                if window is not None:
                    events.append(
                        _span(
                            f"switch {previous_role}→{role}",
                            pid=GPU_PID,
                            tid=device,
                            start_s=window[0],
                            end_s=window[1],
                            cat="resize",
                            args={"resize_id": resize_id},
                        )
                    )
            if current is not None and (role != current[0]):
                events.append(_role_span(device, current))
                current = None
            if role is not None:
                start = current[1] if current else float(step["start_s"])
                first = current[3] if current else int(step["step"])
                current = (role, start, float(step["end_s"]), first)
            previous_role = role
        if current is not None:
            events.append(_role_span(device, current))
    return events


def _role_span(device: int, current: tuple[str, float, float, int]) -> dict:
    role, start, end, first_step = current
    return _span(
        role,
        pid=GPU_PID,
        tid=device,
        start_s=start,
        end_s=end,
        cat="role",
        args={"device": device, "role": role, "first_step": first_step},
    )


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _optional_int(value: Any) -> int | None:
    """A nullable integer field of a record (None or NaN when absent) as int or None."""
    return int(value) if _present(value) else None


StageSpan = tuple[str, float, float, dict[str, Any]]
"""(stage, start_s, end_s, extra args) of one stage span."""


def _stage_windows(steps: list[dict], mode: PipelineMode | None) -> list[list[StageSpan]]:
    """Per step, its stage spans, placed as the pipeline of `mode` runs them."""
    windows = []
    for i, step in enumerate(steps):
        k = int(step["step"])
        start, end = float(step["start_s"]), float(step["end_s"])
        rollout_s, train_s = float(step["rollout_s"]), float(step["train_s"])
        batch = {"rollout_batch_id": _batch_id(step)}
        sync: StageSpan = ("sync", end - float(step["sync_s"]), end, {})
        spans: list[StageSpan]
        if mode in (PipelineMode.SYNC, PipelineMode.COLOCATED):
            train_start = start + rollout_s
            spans = [("rollout", start, train_start, batch)]
        elif mode is PipelineMode.ONE_STEP_OFF:
            previous = steps[i - 1] if i else None
            follows = previous is not None and int(previous["step"]) == k - 1
            spans = []
            train_start = start
            if not follows:  # the run's first step (or a gap): this batch is generated first
                spans.append(("rollout", start, start + rollout_s, batch))
                train_start = start + rollout_s
            following = steps[i + 1] if i + 1 < len(steps) else None
            if following is not None and int(following["step"]) == k + 1:
                next_end = train_start + float(following["rollout_s"])
                spans.append(
                    ("rollout", train_start, next_end, {"rollout_batch_id": _batch_id(following)})
                )
        else:
            train_start = start
            spans = [("rollout", start, start + rollout_s, batch)]
        spans += [("train", train_start, train_start + train_s, {}), sync]
        windows.append(spans)
    return windows


def _batch_id(step: Mapping[str, Any]) -> int:
    batch = step.get("rollout_batch_id")
    return int(batch) if batch is not None and _present(batch) else int(step["step"])


def _stage_events(steps: list[dict], mode: PipelineMode | None) -> list[dict]:
    events: list[dict] = []
    for name, tid in STAGE_TRACKS.items():
        events += track_metadata(PIPELINE_PID, tid, name, tid)
    for step, spans in zip(steps, _stage_windows(steps, mode), strict=True):
        k = int(step["step"])
        start, end = float(step["start_s"]), float(step["end_s"])
        allocation = f"{int(step['train_gpus'])}:{int(step['rollout_gpus'])}"
        common = {"step": k, "allocation": allocation}
        events.append(
            _span(
                f"step {k}",
                pid=PIPELINE_PID,
                tid=STAGE_TRACKS["step"],
                start_s=start,
                end_s=end,
                cat="step",
                args={**common, "tokens": int(step.get("tokens", 0))},
            )
        )
        for name, lo, hi, extra in spans:
            label = k if name != "rollout" else extra["rollout_batch_id"]
            events.append(
                _span(
                    f"{name} {label}",
                    pid=PIPELINE_PID,
                    tid=STAGE_TRACKS[name],
                    start_s=lo,
                    end_s=hi,
                    cat="stage",
                    args={**common, **extra},
                )
            )
    return events


_PHASE_TIDS = {p.value: tid for tid, p in enumerate(PhaseName)}
"""Track of each resize phase: its place among the phase names."""


def _phase_tid(phase: str) -> int:
    tid = _PHASE_TIDS.get(phase)
    if tid is None:
        raise ValueError(f"unknown resize phase {phase!r}")
    return tid


def _resize_events(resizes: list[dict]) -> list[dict]:
    events: list[dict] = []
    phases = [_text(r["phase"]) for r in resizes]
    present = set(phases)
    for known in PhaseName:
        if known.value in present:
            tid = _phase_tid(known.value)
            events += track_metadata(RESIZE_PID, tid, known.value, tid)
    for r, phase in zip(resizes, phases, strict=True):
        critical = bool(r["critical"])
        events.append(
            _span(
                phase,
                pid=RESIZE_PID,
                tid=_phase_tid(phase),
                start_s=float(r["start_s"]),
                end_s=float(r["end_s"]),
                cat="critical" if critical else "background",
                args={
                    "resize_id": int(r["resize_id"]),
                    "strategy": _text(r["strategy"]),
                    "from": _text(r["from_allocation"]),
                    "to": _text(r["to_allocation"]),
                    "critical": critical,
                    "bytes_moved": int(r.get("bytes_moved", 0) or 0),
                },
            )
        )
    return events


def _decision_events(decisions: list[dict]) -> list[dict]:
    if not decisions:
        return []
    events = track_metadata(RESIZE_PID, DECISION_TID, "policy decisions", DECISION_TID)
    for d in decisions:
        events.append(
            {
                "name": _text(d["decision"]),
                "ph": "i",
                "s": "t",
                "pid": RESIZE_PID,
                "tid": DECISION_TID,
                "ts": _us(d["time_s"]),
                "cat": "decision",
                "args": {
                    "step": int(d["step"]),
                    "policy": _text(d["policy"]),
                    "from": _text(d["from_allocation"]),
                    "to": _text(d["to_allocation"]) if _present(d.get("to_allocation")) else None,
                    "reason": _text(d.get("reason", "")),
                },
            }
        )
    return events


def _resize_windows(resizes: list[dict]) -> dict[int, tuple[float, float]]:
    """Span of each resize's critical phases (of all its phases if none is critical)."""
    by_id: dict[int, list[dict]] = {}
    for r in resizes:
        by_id.setdefault(int(r["resize_id"]), []).append(r)
    windows = {}
    for rid, phases in by_id.items():
        span = [r for r in phases if bool(r["critical"])] or phases
        windows[rid] = (
            min(float(r["start_s"]) for r in span),
            max(float(r["end_s"]) for r in span),
        )
    return windows


def chrome_trace(
    steps: Any,
    resizes: Any = None,
    *,
    decisions: Any = None,
    run_name: str = "dynaresize run",
    pipeline_mode: PipelineMode | str | None = None,
) -> dict[str, Any]:
    """Build the Chrome-trace JSON object of one run from its records (DataFrames or lists).

    `pipeline_mode` (the run's `RunMeta.pipeline_mode`) places the stage spans as that pipeline
    runs them; without it they are anchored at each step's start (see the module doc).
    """
    mode = PipelineMode(pipeline_mode) if pipeline_mode is not None else None
    step_rows = sorted(record_rows(steps), key=lambda s: int(s["step"]))
    if not step_rows:
        raise ValueError("a Chrome trace needs at least one step record")
    resize_rows = record_rows(resizes)
    events = track_metadata(GPU_PID, None, "GPUs (role over time)", 0)
    events += track_metadata(PIPELINE_PID, None, "Pipeline (steps and stages)", 0)
    events += _device_role_events(step_rows, _resize_windows(resize_rows))
    events += _stage_events(step_rows, mode)
    if resize_rows or decisions is not None:
        events += track_metadata(RESIZE_PID, None, "Resizes (phases and decisions)", 0)
    events += _resize_events(resize_rows)
    events += _decision_events(record_rows(decisions))
    return {
        "traceEvents": nest_tracks(events),
        "displayTimeUnit": "ms",
        "otherData": {"run": run_name, "clock": "seconds since the run began, as microseconds"},
    }
