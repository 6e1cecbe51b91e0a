"""Arrow tables read from a trace file, as the plain columns the validators check.

Both the whole-table reader (parquet_io) and the block-wise sample reader (sample_lengths) go
through here, so a column type the trace format does not allow is refused the same way, naming
the file and the column, whichever reads it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .errors import TraceError
from .trace import plain_arrow_type


def check_plain_types(schema: pa.Schema, path: Path) -> None:
    """Refuse a column whose Arrow type a trace may not hold (nothing is unpickled)."""
    for fld in schema:
        if not plain_arrow_type(fld.type):
            raise TraceError(
                f"column type {fld.type} is not allowed in a trace",
                source=str(path),
                field=fld.name,
            )


def arrow_frame(table: pa.Table) -> pd.DataFrame:
    """The table's columns as a DataFrame, each as numpy reads it (nulls as NaN or None).

    Text and lists of text hold one Python object per distinct value, shared by the rows that
    hold it (`shared_objects`): a million steps of a few role maps, or decisions of a few
    policies and splits, are then a pointer a row, not an object a row."""
    columns = {
        name: pd.Series(column_values(column), dtype=None)
        for name, column in zip(table.column_names, table.columns, strict=True)
    }
    return pd.DataFrame(columns, index=pd.RangeIndex(table.num_rows))


_KEY_SEPARATOR = "\x1f"
"""Joins a list's texts into the key its distinct value is found by (see `_list_keys`)."""


def column_values(column: pa.ChunkedArray) -> np.ndarray:
    """The column as numpy reads it (`to_numpy`), text and lists of text as shared objects."""
    t = column.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return shared_objects(column, column)
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and (
        pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)
    ):
        keys = _list_keys(column)
        if keys is not None:
            return shared_objects(column, keys)
    return column.to_numpy(zero_copy_only=False)


def shared_objects(column: pa.ChunkedArray, keys: pa.ChunkedArray) -> np.ndarray:
    """`column.to_numpy()` with one object per distinct key, shared by the rows of that key
    (a null key keeps its row's own value)."""
    encoded = keys.combine_chunks().dictionary_encode()
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    present = codes >= 0
    _, first = np.unique(codes[present], return_index=True)
    rows = np.flatnonzero(present)
    distinct = column.take(pa.array(rows[first])).to_numpy(zero_copy_only=False)
    out = np.empty(len(codes), dtype=object)
    # dictionary_encode numbers keys by first appearance, so code k's first row is rows[first[k]]
    out[present] = distinct[codes[present]]
    own = np.flatnonzero(~present)
    if len(own):
        out[own] = column.take(pa.array(own)).to_numpy(zero_copy_only=False)
    return out


def _list_keys(column: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """Each list's texts joined, as the key of its distinct value (null for a null list or one
    holding a null); None where keys could confuse two lists (a text empty or holding the
    separator): the column is then read a row at a time."""
    flat = pc.list_flatten(column)
    if len(flat) and (
        pc.any(pc.equal(flat, "")).as_py()
        or pc.any(pc.match_substring(flat, _KEY_SEPARATOR)).as_py()
    ):
        return None
    return pc.binary_join(column, _KEY_SEPARATOR)


def unreadable(path: Path, err: Exception) -> TraceError:
    """The error for a Parquet file that cannot be read (truncated, corrupt)."""
    return TraceError(
        f"not a readable Parquet file (truncated or corrupt?): {err}", source=str(path)
    )
