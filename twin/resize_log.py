"""The resize phase rows of one run, kept as one small entry per resize.

A resize between two splits always has the same phases (its plan's), shifted to when it
starts; a policy that resizes at nearly every step of a long run makes several phase rows per
step. So a run keeps, per resize, only its step, which plan, when it starts and any drain
before it, and the phase columns are laid out once, with numpy, at the end: the same values
(`start + offset`, in float64 as Python adds them) with none of the per-row tuples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dynaresize.traces.phases import PhaseName

from .text_columns import coded_text

__all__ = ["RESIZE_FIELDS", "PhaseRow", "ResizeLog"]

RESIZE_FIELDS = (
    "resize_id",
    "step",
    "phase",
    "strategy",
    "from_allocation",
    "to_allocation",
    "start_s",
    "end_s",
    "critical",
    "bytes_moved",
)
"""The columns of a resize phase row, in the order the pipeline writes them."""

PhaseRow = tuple[str, float, float, bool, int]
"""One phase of a plan: (phase name, start and end after the resize starts, critical, bytes)."""

_DRAIN: PhaseRow = (PhaseName.ROLLOUT_DRAIN.value, 0.0, 0.0, True, 0)
"""The drain before a resize in async mode: critical, moving no bytes."""


class ResizeLog:
    """Resizes in the order they happen; `columns` gives their phase rows, column by column."""

    def __init__(self, *, first_only: bool = False) -> None:
        self.first_only = first_only
        """`columns` gives the first phase row of each resize alone (its drain, or its plan's
        first phase), with the values the whole table gives it."""
        self.plan_of_pair: dict[tuple[int, int], int] = {}
        self.plan_rows: list[Sequence[PhaseRow]] = []
        self.plan_heads: list[tuple[str, str, str]] = []
        """Per plan: strategy, from split, to split."""
        self.steps: list[int] = []
        self.plans: list[int] = []
        self.start_s: list[float] = []
        self.offset_s: list[float] = []
        """When the plan's phases start: the resize's start, after its drain if any."""
        self.drained: list[bool] = []

    def __len__(self) -> int:
        return len(self.steps)

    def add(
        self,
        step: int,
        pair: tuple[int, int],
        plan: Callable[[], tuple[Sequence[PhaseRow], tuple[str, str, str]]],
        *,
        start_s: float,
        drain_s: float | None,
    ) -> None:
        """Log a resize of split pair `pair` at `step`; `plan` (called once per pair) gives its
        phase rows and (strategy, from label, to label)."""
        index = self.plan_of_pair.get(pair)
        if index is None:
            rows, head = plan()
            index = self.plan_of_pair[pair] = len(self.plan_rows)
            self.plan_rows.append(rows)
            self.plan_heads.append(head)
        self.steps.append(step)
        self.plans.append(index)
        self.start_s.append(start_s)
        self.drained.append(drain_s is not None)
        self.offset_s.append(start_s if drain_s is None else start_s + drain_s)

    def columns(self, names: Sequence[str]) -> dict[str, Any]:
        """Every phase row of every resize as the columns `names` (no columns when there were
        no resizes), in the order the rows happened: numbers as numpy arrays, text as pandas
        text columns (`coded_text`); the first row of each only where `first_only`."""
        if not self.steps:
            return {}
        plan = np.asarray(self.plans, dtype=np.int64)
        drained = np.asarray(self.drained, dtype=bool)
        sizes = np.array([len(rows) for rows in self.plan_rows], dtype=np.int64)
        counts = np.ones_like(plan) if self.first_only else sizes[plan] + drained
        resize = np.repeat(np.arange(len(plan), dtype=np.int64), counts)
        position = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(
            np.cumsum(counts) - counts, counts
        )
        is_drain = drained[resize] & (position == 0)
        # each row's phase among every plan's phases, the drain last (one of its own)
        flat = [row for rows in self.plan_rows for row in rows]
        phase = np.cumsum(sizes) - sizes
        row = np.where(is_drain, len(flat), phase[plan[resize]] + position - drained[resize])
        # columns of the phases as numpy infers them from the same values a list of rows holds
        used = [*flat, _DRAIN] if drained.any() else [*flat, flat[0]]
        table = [np.array([r[i] for r in used]) for i in range(5)]
        offset = np.asarray(self.offset_s, dtype=np.float64)[resize]
        start = np.asarray(self.start_s, dtype=np.float64)[resize]
        plan_of_row = plan[resize]
        values = {
            "resize_id": resize,
            "step": np.asarray(self.steps, dtype=np.int64)[resize],
            "phase": coded_text([r[0] for r in used], row),
            **{
                name: coded_text([head[i] for head in self.plan_heads], plan_of_row)
                for i, name in enumerate(("strategy", "from_allocation", "to_allocation"))
            },
            "start_s": np.where(is_drain, start, offset + table[1][row]),
            "end_s": np.where(is_drain, offset, offset + table[2][row]),
            "critical": table[3][row],
            "bytes_moved": table[4][row],
        }
        return {name: values[name] for name in names}
