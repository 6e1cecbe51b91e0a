"""A table written as CSV the way `DataFrame.to_csv(path, index=False)` writes it, byte for
byte, a column at a time.

A replay's decisions.csv holds a row per step of every compared run (300,000 rows for a
100,000-step trace and two policies); pandas formats and writes them a row at a time. The
values are formatted here as pandas formats them (floats by NumPy's shortest round-trip text,
missing values empty, booleans as True and False), column by column, and the rows joined once.
Tables this does not cover the same way (a value that the csv module would quote, another
column type, a single column) are written by pandas itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

import numpy as np
import pandas as pd

__all__ = ["write_table_csv", "write_tables_csv"]

_NEEDS_QUOTES = re.compile(r'[,"\r\n]')
"""What makes the csv module quote a field (delimiter, quote character, line breaks)."""
_TEXT_OR_MISSING = ("string", "empty")
"""What pandas infers of an object column whose values are text or missing (None, NaN)."""


CHUNK_ROWS = 50_000
"""Rows formatted and written at a time: the fields of one chunk are held, not the table's."""


def write_table_csv(table: pd.DataFrame, path: Path) -> None:
    """`table.to_csv(path, index=False)`, with the same bytes, faster for long tables."""
    if not _writable(table):
        table.to_csv(path, index=False)
        return
    header = ",".join(str(name) for name in table.columns)
    with open(path, "w", encoding="utf-8", newline="") as out:
        out.write(header + "\n")
        _write_rows(table, out)


def write_tables_csv(tables: Iterable[pd.DataFrame], path: Path) -> None:
    """The tables one after the other as one CSV, the header of the first once: the bytes of
    `pd.concat(tables).to_csv(path, index=False)` where the tables have the columns and dtypes
    of that concatenation, with one table in memory at a time, not their concatenation. Each
    table is written as `write_table_csv` writes it (by pandas where it would be), which is
    byte for byte what pandas writes of those rows."""
    with open(path, "w", encoding="utf-8", newline="") as out:
        header = True
        for table in tables:
            if header:
                table.iloc[:0].to_csv(out, index=False)
                header = False
            _write_rows(table, out)


def _write_rows(table: pd.DataFrame, out: TextIO) -> None:
    if not _writable(table):
        table.to_csv(out, index=False, header=False)
        return
    for first in range(0, len(table), CHUNK_ROWS):
        chunk = table.iloc[first : first + CHUNK_ROWS]
        columns = [_fields(chunk[name]) for name in table.columns]
        out.write("\n".join(map(",".join, zip(*columns, strict=True))) + "\n")


def _writable(table: pd.DataFrame) -> bool:
    """Whether every column is of a type formatted here and holds nothing the csv module would
    quote; otherwise pandas writes the table."""
    names = [str(name) for name in table.columns]
    if len(names) < 2 or any(_NEEDS_QUOTES.search(name) or name == "" for name in names):
        return False
    return len(set(names)) == len(names) and all(
        _column_writable(table[name]) for name in table.columns
    )


def _column_writable(column: pd.Series) -> bool:
    dtype = column.dtype
    if _is_text(dtype):
        if (
            _is_object(dtype)
            and pd.api.types.infer_dtype(column, skipna=True) not in _TEXT_OR_MISSING
        ):
            return False
        return not any(_NEEDS_QUOTES.search(value) for value in column.dropna().unique())
    if isinstance(dtype, pd.Int64Dtype):
        return True
    return isinstance(dtype, np.dtype) and dtype.kind in "fiub"


def _fields(column: pd.Series) -> list[str]:
    """One column's fields as pandas writes them (a column `_column_writable` accepts)."""
    dtype = column.dtype
    if _is_text(dtype):
        return column.fillna("").to_numpy(dtype=object).tolist()
    if isinstance(dtype, pd.Int64Dtype):
        missing = column.isna().to_numpy()
        return _with_empty(column.fillna(0).to_numpy(np.int64).astype(str), missing)
    values = column.to_numpy()
    if dtype.kind == "f":
        return _with_empty(values.astype(str), np.isnan(values))
    if dtype.kind == "b":
        return np.where(values, "True", "False").tolist()
    return values.astype(str).tolist()


def _is_object(dtype: object) -> bool:
    return isinstance(dtype, np.dtype) and dtype.kind == "O"


def _is_text(dtype: object) -> bool:
    return isinstance(dtype, pd.StringDtype) or _is_object(dtype)


def _with_empty(text: np.ndarray, missing: np.ndarray) -> list[str]:
    fields = text.astype(object)
    fields[missing] = ""
    return fields.tolist()
