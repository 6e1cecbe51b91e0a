"""Tracks of a Chrome trace: their names and order, and extra tracks where spans would overlap.

Every track nests, as the viewers expect: here every span is work of its own, so a track is a
sequence of spans that do not overlap. Where spans of one track would (a rollout still running
when the next one is drawn, a background phase of one resize outliving the next resize), the
later ones go to extra tracks of the same name, numbered "(2)", "(3)", ... Kept apart from
`chrome_trace`, which places the records' spans on the clock, because this works on any spans,
given as columns (process, track, start and duration in microseconds).
"""

from __future__ import annotations

from typing import Any

import numpy as np

LANE_TID_STRIDE = 1000
"""Extra tracks of a track with tid T get tids T + 1000, T + 2000, ...: clear of every base tid."""
NESTING_TOLERANCE_US = 0.01
"""Spans that touch within this (rounding of the microsecond clock) count as touching."""


def track_metadata(pid: int, tid: int | None, name: str, sort_index: int) -> list[dict[str, Any]]:
    if tid is None:
        return [
            {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}},
            {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}},
        ]
    return [
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}},
        {
            "name": "thread_sort_index",
            "ph": "M",
            "pid": pid,
            "tid": tid,
            "args": {"sort_index": sort_index},
        },
    ]


def _lanes(ts_us: np.ndarray, dur_us: np.ndarray) -> np.ndarray:
    """Lane of each span of one track (0 = the track itself) such that no two spans of a lane
    overlap.

    Every span of this trace is work of its own, never a part of another, so a track holds a
    sequence: a span goes to the first lane whose last span has ended by its start (spans taken
    by start, the longer first, then in the order given), else to a new lane. A track whose
    spans follow each other (the common case) is settled in one pass of numpy; only a track
    with overlaps is walked span by span.
    """
    order = np.lexsort((-dur_us, ts_us))
    start = ts_us[order]
    end = start + dur_us[order]
    lanes = np.zeros(len(ts_us), dtype=np.int64)
    if len(order) < 2 or bool(np.all(end[:-1] <= start[1:] + NESTING_TOLERANCE_US)):
        return lanes
    lane_ends: list[float] = []
    for i, s, e in zip(order.tolist(), start.tolist(), end.tolist(), strict=True):
        lane = next(
            (j for j, lane_end in enumerate(lane_ends) if lane_end <= s + NESTING_TOLERANCE_US),
            len(lane_ends),
        )
        if lane == len(lane_ends):
            lane_ends.append(e)
        lane_ends[lane] = e
        lanes[i] = lane
    return lanes


def nest_tracks(
    pid: np.ndarray, tid: np.ndarray, ts_us: np.ndarray, dur_us: np.ndarray
) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """The track of every span once spans that would break a track's nesting are moved onto
    extra tracks, and the extra tracks made: (pid, base tid, lane), in the order of their
    base tracks' first spans.
    """
    new_tid = tid.astype(np.int64, copy=True)
    extra: list[tuple[int, int, int]] = []
    if len(pid) == 0:
        return new_tid, extra
    keys = pid.astype(np.int64) * (1 << 32) + tid.astype(np.int64)
    unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    members = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[members], np.arange(len(unique) + 1))
    for group in np.argsort(first, kind="stable").tolist():
        rows = members[bounds[group] : bounds[group + 1]]
        lanes = _lanes(ts_us[rows], dur_us[rows])
        most = int(lanes.max())
        if most == 0:
            continue
        new_tid[rows] += LANE_TID_STRIDE * lanes
        base_pid, base_tid = int(pid[rows[0]]), int(tid[rows[0]])
        extra += [(base_pid, base_tid, lane) for lane in range(1, most + 1)]
    return new_tid, extra
