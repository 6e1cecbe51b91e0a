"""Tracks of a Chrome trace: their names and order, and extra tracks where spans would overlap.

Every track nests, as the viewers expect: here every span is work of its own, so a track is a
sequence of spans that do not overlap. Where spans of one track would (a rollout still running
when the next one is drawn, a background phase of one resize outliving the next resize), the
later ones go to extra tracks of the same name, numbered "(2)", "(3)", ... Kept apart from
`chrome_trace`, which places the records' spans on the clock, because this works on any events.
"""

from __future__ import annotations

from typing import Any

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
