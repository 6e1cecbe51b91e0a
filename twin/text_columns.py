"""Text columns of the record tables gathered from their few distinct values.

A run's resize phases and decisions repeat a handful of strings (phase names, strategies, split
labels) over millions of rows. Built as arrays of Python strings, pandas converts them to its
Arrow-backed text one string per row; gathered here by Arrow from the distinct values and an
index per row, the column is the same (`str` dtype, Arrow `large_string`, one chunk) at a
fraction of the cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ._lazy import LazyModule

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
else:
    pd = LazyModule("pandas")
    pa = LazyModule("pyarrow")

__all__ = ["coded_text", "plain_text"]


def coded_text(labels: Sequence[str], codes: np.ndarray) -> pd.api.extensions.ExtensionArray:
    """`labels[codes]` as a pandas text column; a negative code is a missing value."""
    codes = np.asarray(codes, dtype=np.int64)
    missing = codes < 0
    index = pa.array(codes, mask=missing) if missing.any() else pa.array(codes)
    gathered = pa.array(list(labels), type=pa.large_string()).take(index)
    return pd.array(gathered, dtype=pd.StringDtype("pyarrow", na_value=np.nan))


def plain_text(values: Sequence[str]) -> pd.api.extensions.ExtensionArray:
    """Strings that rarely repeat (a policy's reasons) as the same pandas text column, built
    by Arrow from the list at once rather than by pandas' inference row by row."""
    converted = pa.array(values, type=pa.large_string())
    return pd.array(converted, dtype=pd.StringDtype("pyarrow", na_value=np.nan))
