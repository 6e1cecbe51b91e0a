"""Arrow tables read from a trace file, as the plain columns the validators check.

Both the whole-table reader (parquet_io) and the block-wise sample reader (sample_lengths) go
through here, so a column type the trace format does not allow is refused the same way, naming
the file and the column, whichever reads it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa

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
    """The table's columns as a DataFrame, each as numpy reads it (nulls as NaN or None)."""
    columns = {
        name: pd.Series(column.to_numpy(zero_copy_only=False), dtype=None)
        for name, column in zip(table.column_names, table.columns, strict=True)
    }
    return pd.DataFrame(columns, index=pd.RangeIndex(table.num_rows))


def unreadable(path: Path, err: Exception) -> TraceError:
    """The error for a Parquet file that cannot be read (truncated, corrupt)."""
    return TraceError(
        f"not a readable Parquet file (truncated or corrupt?): {err}", source=str(path)
    )
