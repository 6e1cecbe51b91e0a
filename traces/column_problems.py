"""Bad values found in the columns of one table, and the check of its role-list columns.

Kept apart from `validation` (which checks every kind of column against the schema) so that
each stays small: the record of problems every column check writes to, and the one column kind
whose values are lists.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .phases import Role

__all__ = ["Problems", "check_roles", "describe"]


@dataclass
class Problems:
    """Bad rows found in one table: position in the frame -> (field, reason), first found kept."""

    found: dict[int, tuple[str | None, str]] = field(default_factory=dict)

    def add(self, mask: np.ndarray, field_name: str | None, reason_of: typing.Callable) -> None:
        for pos in np.flatnonzero(mask):
            if int(pos) not in self.found:
                self.found[int(pos)] = (field_name, reason_of(int(pos)))


def describe(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}"


def check_roles(col: pd.Series, name: str, problems: Problems) -> pd.Series:
    """Lists of role names. Role maps repeat from step to step (the twin's steps of one split
    share one list object), so each distinct object, and each distinct map, is checked once;
    Parquet's arrays become plain lists."""
    valid = {r.value for r in Role}
    vals = col.to_numpy(dtype=object)
    ids = np.fromiter(map(id, vals), dtype=np.uint64, count=len(vals))
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    distinct = np.empty(len(first), dtype=object)
    distinct_bad = np.zeros(len(first), dtype=bool)
    checked: dict[tuple, bool] = {}
    for j, i in enumerate(first.tolist()):
        v = vals[i]
        if isinstance(v, np.ndarray):
            v = v.tolist()
        elif isinstance(v, tuple):
            v = list(v)
        if not isinstance(v, list):
            distinct_bad[j] = True
            distinct[j] = []
            continue
        key = tuple(v)
        ok = checked.get(key)
        if ok is None:
            ok = checked[key] = all(isinstance(x, str) and x in valid for x in v)
        distinct_bad[j] = not ok
        distinct[j] = v if ok else []
    out = distinct[inverse]
    bad = distinct_bad[inverse]
    problems.add(
        bad,
        name,
        lambda i: f"expected a list of roles {sorted(valid)}, got {describe(vals[i])}",
    )
    return pd.Series(out, index=col.index, dtype=object)
