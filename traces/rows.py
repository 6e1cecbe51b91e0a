"""Trace records as plain dicts, whatever holds them: a DataFrame, pydantic records or mappings.

For writers that walk the records one by one (the Chrome trace). It imports no pandas: a
DataFrame is recognised by its methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _frame_rows(frame: Any) -> list[dict[str, Any]]:
    """A DataFrame's rows as `to_dict(orient="records")` gives them (Python values, None for a
    missing nullable integer), built a column at a time: several times faster."""
    from pandas import NA

    names = list(frame.columns)
    columns = []
    for name in names:
        values = frame[name].tolist()
        if any(v is NA for v in values):
            values = [None if v is NA else v for v in values]
        columns.append(values)
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


def record_rows(records: Any) -> list[dict[str, Any]]:
    """Accept a pandas DataFrame, pydantic records or plain dicts; return plain dicts."""
    if records is None:
        return []
    if hasattr(records, "to_dict") and hasattr(records, "columns"):
        return _frame_rows(records)
    rows = []
    for record in records:
        if hasattr(record, "model_dump"):
            rows.append(record.model_dump(mode="json"))
        elif isinstance(record, Mapping):
            rows.append(dict(record))
        else:
            raise TypeError(f"cannot read a trace record of type {type(record).__name__}")
    return rows


def record_column(records: Any, name: str) -> list[Any]:
    """One field of every record, from a DataFrame's column or from each record."""
    if hasattr(records, "columns") and hasattr(records, "loc"):
        return records[name].tolist()
    return [row[name] for row in record_rows(records)]
