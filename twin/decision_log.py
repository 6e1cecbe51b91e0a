"""The policy calls of one run, kept as typed columns and laid out as the decisions table once.

A run asks its policy at every step boundary; at a million steps a tuple per call (ten fields,
most of them the same few strings) holds more memory than the table, and turning a million
rows of strings into pandas text costs seconds. Per call this keeps only what varies: the step,
the clock, the split it ran on, the split it moves to (-1: it holds) and the policy's reason.
The rest is known per run (the policy's name, the cost source) or per pair of splits (labels,
a move's predicted stall), and the resize ids follow from the order of the resizes: the columns
are the values the tuples held, gathered by numpy and Arrow (`text_columns.coded_text`).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._lazy import LazyModule
from .text_columns import coded_text, plain_text

if TYPE_CHECKING:
    import pandas as pd

    from .costs.resize import ResizePlan
else:
    pd = LazyModule("pandas")

__all__ = ["DecisionLog"]

_DECISION_LABELS = ("hold", "resize")


class DecisionLog:
    """Policy calls in the order they happen; `columns` gives the decisions table's columns."""

    __slots__ = ("reasons", "splits", "steps", "targets", "times_s")

    def __init__(self) -> None:
        self.steps = array("q")
        self.times_s = array("d")
        self.splits = array("h")
        """The index of the split the call was made on."""
        self.targets = array("h")
        """The index of the split it moves to; -1 where it holds."""
        self.reasons: list[str] = []

    def __len__(self) -> int:
        return len(self.steps)

    def columns(
        self,
        names: Sequence[str],
        *,
        policy: str,
        labels: Sequence[str],
        cost_source: str,
        plans: Sequence[Sequence[ResizePlan | None]],
    ) -> dict[str, Any]:
        """The calls as the columns `names` (none when there were no calls).

        `plans[current][target]`: the plan of each move, whose critical path is its predicted
        stall. A column missing at every row (no call resized) is a list of None, as rows of
        None would give; the resize ids are a nullable integer column either way.
        """
        num_calls = len(self.steps)
        if not num_calls:
            return {}
        targets = np.frombuffer(self.targets, dtype=np.int16).astype(np.int64)
        splits = np.frombuffer(self.splits, dtype=np.int16).astype(np.int64)
        moves = targets >= 0
        values: dict[str, Any] = {
            "step": np.frombuffer(self.steps, dtype=np.int64).copy(),
            "time_s": np.frombuffer(self.times_s, dtype=np.float64).copy(),
            "policy": coded_text([policy], np.zeros(num_calls, dtype=np.int64)),
            "decision": coded_text(_DECISION_LABELS, moves.astype(np.int64)),
            "from_allocation": coded_text(labels, splits),
            "cost_source": coded_text([cost_source], np.zeros(num_calls, dtype=np.int64)),
            "reason": plain_text(self.reasons),
        }
        # A resize's id is its place among the run's resizes, one per call that moved.
        resize_id = np.where(moves, np.cumsum(moves) - 1, 0)
        values["resize_id"] = pd.arrays.IntegerArray(resize_id, ~moves)
        if moves.any():
            critical_s = np.array(
                [[np.nan if p is None else p.critical_s for p in row] for row in plans],
                dtype=np.float64,
            ).reshape(len(plans), len(plans))
            critical = np.full(num_calls, np.nan)
            critical[moves] = critical_s[splits[moves], targets[moves]]
            values["to_allocation"] = coded_text(labels, targets)
            values["predicted_resize_critical_s"] = critical
        else:
            values["to_allocation"] = [None] * num_calls
            values["predicted_resize_critical_s"] = [None] * num_calls
        return {name: values[name] for name in names}
