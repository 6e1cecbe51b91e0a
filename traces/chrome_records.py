"""Trace records read a field at a time, for the Chrome-trace builder (`chrome_trace`).

The records of a run come as a DataFrame (the twin, a trace read back) or as pydantic records or
mappings (a log, a live run): either way the builder reads whole columns, as numpy where they
are numbers, and puts the steps in order once.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .rows import record_rows

__all__ = ["RecordColumns", "present", "text"]


def text(value: Any) -> str:
    return str(getattr(value, "value", value))


def present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


class RecordColumns:
    """A table of records (a DataFrame, pydantic records or mappings) a field at a time, as
    Python values with None where a nullable field is missing."""

    def __init__(self, records: Any) -> None:
        self._frame = records if hasattr(records, "columns") and hasattr(records, "loc") else None
        self._rows = [] if self._frame is not None else record_rows(records)
        self._order: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._frame) if self._frame is not None else len(self._rows)

    def has(self, name: str) -> bool:
        if self._frame is not None:
            return name in self._frame.columns
        return any(name in row for row in self._rows)

    def values(self, name: str) -> list[Any]:
        """The field of every record, in the table's order (see `sort_by`)."""
        if self._frame is not None:
            from pandas import NA

            column = self._frame[name]
            values = column.tolist()
            if column.dtype == object or (column.hasnans and column.dtype.kind not in "fc"):
                values = [None if v is NA else v for v in values]
        else:
            values = [row[name] for row in self._rows]
        if self._order is not None:
            values = [values[i] for i in self._order.tolist()]
        return values

    def optional(self, name: str, default: Any = None) -> list[Any]:
        """A field records may leave out (`default` where the table has no such column)."""
        if self._frame is None and not all(name in row for row in self._rows):
            rows = self._rows
            values = [row.get(name, default) for row in rows]
            return values if self._order is None else [values[i] for i in self._order.tolist()]
        return self.values(name) if self.has(name) or not len(self) else [default] * len(self)

    def floats(self, name: str) -> np.ndarray:
        if self._frame is not None and self._frame[name].dtype.kind in "fiu":
            values = self._frame[name].to_numpy(dtype=np.float64)
            return values if self._order is None else values[self._order]
        return np.array(self.values(name), dtype=np.float64)

    def ints(self, name: str) -> np.ndarray:
        if self._frame is not None and self._frame[name].dtype.kind in "iu":
            values = self._frame[name].to_numpy(dtype=np.int64)
            return values if self._order is None else values[self._order]
        return np.array([int(v) for v in self.values(name)], dtype=np.int64)

    def sort_by(self, name: str) -> None:
        """Order the records by an integer field (stable)."""
        self._order = np.argsort(self.ints(name), kind="stable")
