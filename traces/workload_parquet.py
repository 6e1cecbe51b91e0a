"""samples.parquet of a workload, written straight from its arrays a chunk of rows at a time.

The twin writes its workload's samples beside every simulated run so that the folder can be
replayed. At a million steps that table has over 10^8 rows: built whole as a DataFrame and
validated column by column it would take several times the workload's memory. Here each chunk
of rows becomes Arrow arrays of the samples schema (the unknown columns as nulls) and is written,
so the file is the one `write_trace` writes for `workload_samples(workload)`, row group for
row group, with the memory of one chunk. The workload's own checks (non-negative lengths,
offsets that never fall) are what the samples schema asks of these columns.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .parquet_io import ROWS_PER_CHUNK, _arrow_schema
from .schema import SCHEMA_VERSION, SampleRecord
from .workload import Workload

__all__ = ["write_workload_samples"]

_KNOWN = ("schema_version", "step", "sample_index", "prompt_tokens", "response_tokens")


def _chunk(workload: Workload, lo: int, hi: int, schema: pa.Schema) -> pa.Table:
    """Rows [lo, hi) of the workload's samples table as an Arrow table of `schema`."""
    rows = np.arange(lo, hi, dtype=np.int64)
    offsets = workload.step_offsets
    step = np.searchsorted(offsets, rows, side="right") - 1
    known = {
        "schema_version": np.full(hi - lo, SCHEMA_VERSION, dtype=np.int64),
        "step": step,
        "sample_index": rows - offsets[step],
        "prompt_tokens": workload.prompt_tokens[lo:hi],
        "response_tokens": workload.response_tokens[lo:hi],
    }
    arrays = [
        pa.array(known[f.name], type=f.type) if f.name in known else pa.nulls(hi - lo, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def write_workload_samples(path: str | Path, workload: Workload) -> Path:
    """Write `workload`'s samples table to `path` (Parquet); returns the path."""
    path = Path(path)
    schema = _arrow_schema(SampleRecord)
    missing = [name for name in _KNOWN if name not in schema.names]
    if missing:  # the schema and this writer must move together
        raise ValueError(f"the samples schema has no column {missing[0]!r}")
    total = len(workload.prompt_tokens)
    if total <= ROWS_PER_CHUNK:
        pq.write_table(_chunk(workload, 0, total, schema), path)
        return path
    with pq.ParquetWriter(path, schema) as writer:
        for lo in range(0, total, ROWS_PER_CHUNK):
            writer.write_table(_chunk(workload, lo, min(total, lo + ROWS_PER_CHUNK), schema))
    return path
