"""Events of a Chrome trace held as columns, and their JSON text.

A long run's trace holds hundreds of thousands of events. Built as one dict each and passed to
`json.dumps` they cost more than simulating the run; here the events of one kind are a block of
columns (numpy times, JSON text of each name and argument object) and each event's text is one
format of values already converted. The text is what `json.dumps(..., separators=(",", ":"))`
writes for the same events: numbers as Python writes them, text escaped by `json` itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .chrome_tracks import LANE_TID_STRIDE, nest_tracks, track_metadata

__all__ = [
    "MICROSECONDS_PER_S",
    "Instants",
    "Spans",
    "TraceEvents",
    "json_texts",
    "microseconds",
]

MICROSECONDS_PER_S = 1_000_000.0


_EXACT_BELOW = 2.0**52 / 1000
"""Values below this, once rounded, are whole thousandths exactly held as integers in a double."""


def rounded(values: np.ndarray) -> np.ndarray:
    """Values rounded to 3 decimals exactly as Python's `round(v, 3)` rounds them.

    `round` takes the whole number N nearest to the exact v * 1000 (ties to even) and returns
    the double nearest to N / 1000, which a double division of N gives as well. N is found
    here in integers: a double is a 53-bit whole number times a power of two, so v * 1000 is
    that number times 1000 (under 2^63), shifted right with the bits shifted out deciding
    the rounding. Values too small, too large or not finite go through `round` itself.
    """
    x = np.asarray(values, dtype=np.float64)
    magnitude = np.abs(x)
    fraction, exponent = np.frexp(magnitude)
    shift = 53 - exponent.astype(np.int64)  # magnitude = mantissa / 2**shift
    exact = np.isfinite(x) & (magnitude < _EXACT_BELOW) & (shift >= 1) & (shift <= 62)
    shift = np.where(exact, shift, 1)
    scaled = np.where(exact, fraction * 2.0**53, 0.0).astype(np.int64) * 1000
    whole = scaled >> shift
    rest = scaled - (whole << shift)
    half = np.left_shift(1, shift - 1)
    whole += (rest > half) | ((rest == half) & (whole % 2 == 1))
    out = np.copysign(whole / 1000.0, x)
    others = np.flatnonzero(~exact)
    if len(others):
        out[others] = [round(v, 3) for v in x[others].tolist()]
    return out


def microseconds(seconds: np.ndarray) -> np.ndarray:
    """Seconds on the trace's clock: microseconds to 3 decimals."""
    return rounded(np.asarray(seconds, dtype=np.float64) * MICROSECONDS_PER_S)


def json_texts(values: Iterable[Any], convert: Callable[[Any], Any] | None = None) -> list[str]:
    """The JSON text of each value (of `convert(value)` if given), each distinct value
    converted and encoded once."""
    cache: dict[Any, str] = {}

    def encode(value: Any) -> str:
        text = cache[value] = json.dumps(convert(value) if convert is not None else value)
        return text

    return [cache[v] if v in cache else encode(v) for v in values]


def _finite(values: np.ndarray, what: str) -> None:
    if len(values) and not bool(np.isfinite(values).all()):
        raise ValueError(f"Out of range float values are not JSON compliant: a span's {what}")


@dataclass
class Spans:
    """Complete ('X') events of one process, as columns (one row per span, in trace order)."""

    names: Sequence[str]
    """JSON text of each span's name."""
    pid: int
    tid: np.ndarray
    ts_us: np.ndarray
    dur_us: np.ndarray
    cat: Sequence[str] | str
    """JSON text of the category: one for every span, or one per span."""
    args: Sequence[str]
    """JSON text of each span's argument object."""

    @classmethod
    def between(
        cls,
        *,
        names: Sequence[str],
        pid: int,
        tid: np.ndarray | int,
        start_s: np.ndarray,
        end_s: np.ndarray,
        cat: Sequence[str] | str,
        args: Sequence[str],
    ) -> Spans:
        """Spans from start to end in seconds. Both ends are put on the rounded clock, so that a
        span ending where the next begins touches it exactly instead of overlapping it by a
        rounding error; a span that would end before it starts lasts zero."""
        ts = microseconds(start_s)
        length = microseconds(end_s) - ts
        dur = rounded(np.where(length > 0.0, length, 0.0))
        _finite(ts, "start")
        _finite(dur, "duration")
        tids = np.broadcast_to(np.asarray(tid, dtype=np.int64), ts.shape).copy()
        return cls(names=names, pid=pid, tid=tids, ts_us=ts, dur_us=dur, cat=cat, args=args)

    def __len__(self) -> int:
        return len(self.ts_us)

    def texts(self) -> Iterator[str]:
        head = (
            f'{{"name":%s,"ph":"X","pid":{self.pid},"tid":%d,"ts":%r,"dur":%r,"cat":%s,"args":%s}}'
        )
        cats = [self.cat] * len(self) if isinstance(self.cat, str) else self.cat
        rows = zip(
            self.names,
            self.tid.tolist(),
            self.ts_us.tolist(),
            self.dur_us.tolist(),
            cats,
            self.args,
            strict=True,
        )
        return (head % row for row in rows)


@dataclass
class Instants:
    """Instant ('i') events of one track, as columns."""

    names: Sequence[str]
    pid: int
    tid: int
    ts_us: np.ndarray
    cat: str
    args: Sequence[str]

    def texts(self) -> Iterator[str]:
        _finite(self.ts_us, "time")
        head = (
            f'{{"name":%s,"ph":"i","s":"t","pid":{self.pid},"tid":{self.tid},"ts":%r,'
            f'"cat":{self.cat},"args":%s}}'
        )
        rows = zip(self.names, self.ts_us.tolist(), self.args, strict=True)
        return (head % row for row in rows)


Block = Spans | Instants | list[dict[str, Any]]
"""Events in trace order: a block of spans, of instants, or metadata events as dicts."""


class TraceEvents:
    """The events of a trace in order, and its text once every track nests."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []

    def add(self, block: Block) -> None:
        self.blocks.append(block)

    def _nest(self) -> list[dict[str, Any]]:
        """Move overlapping spans onto extra tracks; returns the extra tracks' metadata."""
        spans = [b for b in self.blocks if isinstance(b, Spans) and len(b)]
        if not spans:
            return []
        pid = np.concatenate([np.full(len(b), b.pid, dtype=np.int64) for b in spans])
        tid = np.concatenate([b.tid for b in spans])
        ts = np.concatenate([b.ts_us for b in spans])
        dur = np.concatenate([b.dur_us for b in spans])
        new_tid, extra = nest_tracks(pid, tid, ts, dur)
        lo = 0
        for block in spans:
            block.tid = new_tid[lo : lo + len(block)]
            lo += len(block)
        names = self._track_names()
        metadata: list[dict[str, Any]] = []
        for p, t, lane in extra:
            name, sort_index = names.get((p, t), (str(t), t))
            metadata += track_metadata(
                p, t + LANE_TID_STRIDE * lane, f"{name} ({lane + 1})", sort_index
            )
        return metadata

    def _track_names(self) -> dict[tuple[int, int], tuple[str, int]]:
        names: dict[tuple[int, int], tuple[str, int]] = {}
        for block in self.blocks:
            if not isinstance(block, list):
                continue
            for e in block:
                if e["name"] == "thread_name":
                    names[(e["pid"], e["tid"])] = (e["args"]["name"], 0)
                elif e["name"] == "thread_sort_index":
                    name, _ = names.get((e["pid"], e["tid"]), ("", 0))
                    names[(e["pid"], e["tid"])] = (name, e["args"]["sort_index"])
        return names

    def texts(self) -> Iterator[str]:
        """Every event's JSON text, in order, the extra tracks' metadata last (call once)."""
        extra = self._nest()
        for block in [*self.blocks, extra]:
            if isinstance(block, list):
                yield from (json.dumps(e, separators=(",", ":")) for e in block)
            else:
                yield from block.texts()
