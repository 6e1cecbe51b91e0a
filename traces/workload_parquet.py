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

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .parquet_io import ROWS_PER_CHUNK, arrow_schema
from .produced_ahead import produced_ahead
from .schema import SCHEMA_VERSION, SampleRecord
from .workload import Workload

__all__ = ["write_workload_samples"]

_KNOWN = ("schema_version", "step", "sample_index", "prompt_tokens", "response_tokens")


def _columns(block: Workload, lo: int, hi: int, first_step: int) -> dict[str, np.ndarray]:
    """The known columns of samples [lo, hi) of a block whose first step is `first_step`: each
    step's number repeated over its samples (steps are in order, so no search per row)."""
    offsets = block.step_offsets
    first = int(np.searchsorted(offsets, lo, side="right")) - 1
    past = int(np.searchsorted(offsets, hi, side="left"))
    counts = np.diff(np.clip(offsets[first : past + 1], lo, hi))
    step = np.repeat(np.arange(first, past, dtype=np.int64), counts)
    return {
        "step": step + first_step,
        "sample_index": np.arange(lo, hi, dtype=np.int64) - offsets[step],
        "prompt_tokens": block.prompt_tokens[lo:hi],
        "response_tokens": block.response_tokens[lo:hi],
    }


def _table(columns: dict[str, np.ndarray], schema: pa.Schema) -> pa.Table:
    """Rows of the samples table as an Arrow table of `schema` (unknown columns as nulls)."""
    num_rows = len(columns["step"])
    known = {"schema_version": np.full(num_rows, SCHEMA_VERSION, dtype=np.int64), **columns}
    arrays = [
        pa.array(known[f.name], type=f.type) if f.name in known else pa.nulls(num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _row_groups(
    blocks: Iterable[tuple[int, Workload]], rows_per_group: int
) -> Iterator[dict[str, np.ndarray]]:
    """The known columns of blocks of whole steps, cut into groups of `rows_per_group` rows
    (the last one shorter) whatever the blocks' sizes: one block and one group in memory."""
    pending: list[dict[str, np.ndarray]] = []
    pending_rows = 0
    for first_step, block in blocks:
        size, lo = len(block.prompt_tokens), 0
        while lo < size:
            hi = min(size, lo + rows_per_group - pending_rows)
            pending.append(_columns(block, lo, hi, first_step))
            pending_rows += hi - lo
            lo = hi
            if pending_rows == rows_per_group:
                yield _joined(pending)
                pending, pending_rows = [], 0
    if pending_rows:
        yield _joined(pending)


def _joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if len(parts) == 1:
        return parts[0]
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def write_workload_samples(
    path: str | Path, workload: Workload | Iterable[tuple[int, Workload]]
) -> Path:
    """Write the samples table of `workload` to `path` (Parquet); returns the path.

    `workload` may also be its blocks of whole steps, in order, as `(first step, block)`
    (`traces.synthetic.workload_blocks`): the file is the same, row group for row group.
    """
    path = Path(path)
    schema = arrow_schema(SampleRecord)
    missing = [name for name in _KNOWN if name not in schema.names]
    if missing:  # the schema and this writer must move together
        raise ValueError(f"the samples schema has no column {missing[0]!r}")
    blocks = iter([(0, workload)]) if isinstance(workload, Workload) else iter(workload)
    # Drawing the lengths and cutting row groups runs a group ahead of the encoder, on a
    # thread of its own: both let go of the interpreter for most of their work.
    groups = produced_ahead(_table(g, schema) for g in _row_groups(blocks, ROWS_PER_CHUNK))
    first = next(groups, None)
    if first is None:
        pq.write_table(_table(_columns(_EMPTY, 0, 0, 0), schema), path)
        return path
    second = next(groups, None)
    if second is None:
        pq.write_table(first, path)
        return path
    with pq.ParquetWriter(path, schema) as writer:
        writer.write_table(first)
        writer.write_table(second)
        for group in groups:
            writer.write_table(group)
    return path


_EMPTY = Workload(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(1, np.int64))
