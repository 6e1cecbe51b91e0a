"""Chrome-trace (Perfetto) export of any run, twin or live, from its trace-schema records.

Open the JSON in https://ui.perfetto.dev or chrome://tracing. Three processes:
- "GPUs": one track per device with its role over time (from `device_roles`), and a
  "switch train→rollout" span on a device while a resize moves it;
- "Pipeline": a track of whole steps and one track per stage (rollout, train, weight sync);
- "Resizes": one track per phase name, critical and background phases told apart by category,
  plus the policy's decisions as instant events when decision records are given.

Schema v1 records a stage's duration, not its start, so stage spans are placed where the pipeline
puts them, given its mode: in `sync` (and `colocated`) rollout, training and weight sync follow
each other; in `one_step_off` the rollout of batch k+1 runs beside training on batch k (the first
step generates batch 0 first), so a step's rollout span is the next batch's; the weight sync
always ends the step. In `async` mode, or when the mode is not given, rollout and training are
anchored at the step's start: rollout runs ahead of training there, and when they are not known
exactly the spans of one track may overlap.

Every track nests, as the viewers expect (`chrome_tracks` moves spans that would overlap onto
extra tracks of the same name). Events are built a column at a time from the records' columns
and written as text without a dict per event (`chrome_events`): a trace of 20,000 steps of a
policy that resizes at every step holds about 400,000 events.
Imports nothing of the project but `traces/` itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .chrome_events import MICROSECONDS_PER_S, TraceEvents
from .chrome_layout import (
    DECISION_TID,
    GPU_PID,
    PIPELINE_PID,
    RESIZE_PID,
    STAGE_TRACKS,
    decision_events,
    device_role_events,
    resize_events,
    resize_windows,
    stage_events,
)
from .chrome_records import RecordColumns
from .chrome_tracks import LANE_TID_STRIDE, NESTING_TOLERANCE_US, track_metadata
from .phases import PipelineMode
from .rows import record_column

__all__ = [
    "CHROME_TRACE_MAX_STEPS",
    "DECISION_TID",
    "GPU_PID",
    "LANE_TID_STRIDE",
    "MICROSECONDS_PER_S",
    "NESTING_TOLERANCE_US",
    "PIPELINE_PID",
    "RESIZE_PID",
    "STAGE_TRACKS",
    "chrome_trace",
    "chrome_trace_text",
    "iter_spans",
    "write_chrome_trace",
]

CLOCK = "seconds since the run began, as microseconds"


def _trace_events(
    steps: Any, resizes: Any, decisions: Any, mode: PipelineMode | None
) -> TraceEvents:
    step_records = RecordColumns(steps)
    if not len(step_records):
        raise ValueError("a Chrome trace needs at least one step record")
    step_records.sort_by("step")
    resize_records = RecordColumns(resizes)
    events = TraceEvents()
    events.add(track_metadata(GPU_PID, None, "GPUs (role over time)", 0))
    events.add(track_metadata(PIPELINE_PID, None, "Pipeline (steps and stages)", 0))
    device_role_events(events, step_records, resize_windows(resize_records))
    stage_events(events, step_records, mode)
    if len(resize_records) or decisions is not None:
        events.add(track_metadata(RESIZE_PID, None, "Resizes (phases and decisions)", 0))
    resize_events(events, resize_records)
    decision_events(events, RecordColumns(decisions))
    return events


def _write_text(
    out: Any, events: TraceEvents, other_data: dict[str, Any], *, lines_per_write: int = 50_000
) -> None:
    """The trace's JSON text, written a slice of events at a time."""
    out.write('{"traceEvents":[')
    pending: list[str] = []
    first = True
    for text in events.texts():
        pending.append(text)
        if len(pending) == lines_per_write:
            out.write(("" if first else ",") + ",".join(pending))
            pending, first = [], False
    if pending:
        out.write(("" if first else ",") + ",".join(pending))
    tail = json.dumps(other_data, separators=(",", ":"), allow_nan=False)
    out.write(f'],"displayTimeUnit":"ms","otherData":{tail}}}')


def chrome_trace_text(
    steps: Any,
    resizes: Any = None,
    *,
    decisions: Any = None,
    run_name: str = "dynaresize run",
    pipeline_mode: PipelineMode | str | None = None,
) -> str:
    """The Chrome-trace JSON text of one run (what `write_chrome_trace` writes)."""
    import io

    mode = PipelineMode(pipeline_mode) if pipeline_mode is not None else None
    buffer = io.StringIO()
    _write_text(buffer, _trace_events(steps, resizes, decisions, mode), _other_data(run_name))
    return buffer.getvalue()


def _other_data(run_name: str, **shown: Any) -> dict[str, Any]:
    return {"run": run_name, "clock": CLOCK, **shown}


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
    text = chrome_trace_text(
        steps, resizes, decisions=decisions, run_name=run_name, pipeline_mode=pipeline_mode
    )
    return json.loads(text)


CHROME_TRACE_MAX_STEPS = 20_000
"""Steps a run's trace.json shows by default: about 60 MB of JSON for a policy that resizes at
every step, which the viewers still open; a longer run's trace shows its first steps."""


def _first_steps(records: Any, last_step: int) -> Any:
    """The records of steps up to `last_step`: a DataFrame's rows, or a list's items."""
    if records is None:
        return None
    if hasattr(records, "columns") and hasattr(records, "loc"):
        return records.loc[records["step"].to_numpy() <= last_step]
    return [r for r in records if int(r["step"]) <= last_step]


def _step_numbers(steps: Any) -> np.ndarray:
    if hasattr(steps, "columns") and hasattr(steps, "loc"):
        return np.sort(steps["step"].to_numpy(dtype=np.int64), kind="stable")
    return np.sort(np.array([int(s) for s in record_column(steps, "step")], dtype=np.int64))


def write_chrome_trace(
    path: str | Path,
    steps: Any,
    resizes: Any = None,
    *,
    decisions: Any = None,
    run_name: str = "dynaresize run",
    pipeline_mode: PipelineMode | str | None = None,
    max_steps: int | None = None,
) -> Path:
    """Write the run's Chrome trace to `path` (JSON); returns the path written.

    With `max_steps`, a run of more steps shows its first `max_steps` (with their resizes and
    decisions) and says so in its name and in its `otherData` (`steps_shown`, `steps_in_run`):
    a trace of every step of a long run is larger than the viewers open.
    """
    shown: dict[str, Any] = {}
    if max_steps is not None and len(steps) > max_steps:
        numbers = _step_numbers(steps)
        first_step, last_step = int(numbers[0]), int(numbers[max_steps - 1])
        run_name = f"{run_name} (steps {first_step}-{last_step} of {len(numbers):,})"
        shown = {"steps_shown": [first_step, last_step], "steps_in_run": len(numbers)}
        steps, resizes, decisions = (
            _first_steps(records, last_step) for records in (steps, resizes, decisions)
        )
    mode = PipelineMode(pipeline_mode) if pipeline_mode is not None else None
    events = _trace_events(steps, resizes, decisions, mode)
    target = Path(path)
    with open(target, "w", encoding="utf-8") as out:
        _write_text(out, events, _other_data(run_name, **shown))
    return target


def iter_spans(trace: Mapping[str, Any]) -> Iterable[dict[str, Any]]:
    """The complete ('X') events of a trace, for readers and tests."""
    return (e for e in trace["traceEvents"] if e.get("ph") == "X")
