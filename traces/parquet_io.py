"""The Parquet format: a directory with `meta.json` and one Parquet file per table.

A single `.parquet` file is read as a steps table alone. Columns must have plain Arrow types; a
corrupt or truncated file is reported as such, naming it.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from .arrow_frame import arrow_frame, check_plain_types, unreadable
from .errors import TraceError
from .produced_ahead import produced_ahead
from .sample_lengths import read_sample_lengths
from .schema import RunMeta, StepRecord
from .trace import TABLES, Trace, meta_from_dict, plain_column
from .validation import (
    ColumnKind,
    SkippedRow,
    check_step_numbering,
    column_specs,
    drop_orphan_samples,
    empty_frame,
    validate_frame,
)


def arrow_schema(model: type[BaseModel]) -> pa.Schema:
    """The Arrow schema a record table of `model` is written with (every column nullable)."""
    types = {
        ColumnKind.INT: pa.int64(),
        ColumnKind.FLOAT: pa.float64(),
        ColumnKind.BOOL: pa.bool_(),
        ColumnKind.STR: pa.string(),
        ColumnKind.ROLES: pa.list_(pa.string()),
    }
    return pa.schema([pa.field(s.name, types[s.kind], nullable=True) for s in column_specs(model)])


TableFile = Path | Callable[[Path], object]
"""A table given as a file to link (or copy), or as a function that writes it at the path
given."""


def link_or_copy(source: Path, target: Path) -> None:
    """Put the file `source` at the new path `target`: a hard link where the file system allows
    one (a run folder's samples table, hundreds of MB at a million steps, is then on disk once
    however many policy folders hold it), else a copy. `target` must not exist: nothing already
    there is replaced."""
    try:
        os.link(source, target)
    except OSError as err:
        if err.errno == errno.EEXIST:
            raise
        shutil.copyfile(source, target)


ROWS_PER_CHUNK = 1 << 20
"""Rows converted and written at a time (pyarrow's default row group): a table of any length
is written with the memory of one chunk of Arrow columns, not of the whole table."""

_NUMPY_DTYPES = {
    ColumnKind.INT: np.dtype(np.int64),
    ColumnKind.FLOAT: np.dtype(np.float64),
    ColumnKind.BOOL: np.dtype(np.bool_),
}


def _arrow_column(col: pd.Series, kind: ColumnKind, arrow_type: pa.DataType) -> pa.Array:
    """One column as Arrow, without a Python step per row: numeric columns straight from their
    numpy values (missing values, NaN included, as nulls), text from its pandas (Arrow) array
    or its array of objects,
    role lists a distinct list at a time (`_role_lists`); anything else through Python values
    (`plain_column`)."""
    if kind is ColumnKind.ROLES:
        return _role_lists(col, arrow_type)
    if kind is ColumnKind.STR and isinstance(col.dtype, pd.StringDtype):
        return pa.array(col.array, type=arrow_type)
    if kind is ColumnKind.STR and col.dtype == object:
        return pa.array(col.to_numpy(dtype=object), type=arrow_type, from_pandas=True)
    dtype = _NUMPY_DTYPES.get(kind)
    if dtype is None or not (
        col.dtype == dtype or (kind is ColumnKind.INT and isinstance(col.dtype, pd.Int64Dtype))
    ):
        return pa.array(plain_column(col, kind), type=arrow_type)
    missing = col.isna().to_numpy()
    if not missing.any():
        return pa.array(col.to_numpy(), type=arrow_type)
    values = col.to_numpy(dtype=dtype, na_value=dtype.type(0))
    return pa.array(values, type=arrow_type, mask=missing)


def _role_lists(col: pd.Series, arrow_type: pa.DataType) -> pa.Array:
    """A column of role lists as Arrow lists. A run's steps share a handful of role lists (the
    twin gives every step of one split the same list object), so each distinct object is
    converted once and the column is gathered from them."""
    values = col.to_numpy(dtype=object)
    ids = np.fromiter(map(id, values), dtype=np.uint64, count=len(values))
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    distinct = pa.array([[str(x) for x in values[i]] for i in first.tolist()], type=arrow_type)
    return distinct.take(pa.array(inverse.astype(np.int64)))


def _chunk_table(df: pd.DataFrame, lo: int, model: type[BaseModel], schema: pa.Schema) -> pa.Table:
    """Rows [lo, lo + ROWS_PER_CHUNK) of a record table as an Arrow table of `schema`."""
    chunk = df.iloc[lo : lo + ROWS_PER_CHUNK]
    specs = zip(column_specs(model), schema, strict=True)
    arrays = [_arrow_column(chunk[spec.name], spec.kind, fld.type) for spec, fld in specs]
    return pa.Table.from_arrays(arrays, schema=schema)


def write_parquet_dir(
    directory: Path,
    trace: Trace,
    *,
    table_files: Mapping[str, TableFile] | None = None,
    validate: bool = False,
    source: str | None = None,
) -> None:
    """meta.json and a Parquet file per table; a table in `table_files` is linked to (or copied
    from) the file given, or written by the function given, instead. With `validate`, each table
    is checked (`validate_frame`, naming `source`) just before it is written: a bad table stops
    the write there (the caller's staging folder then leaves nothing behind).

    Checking a table and converting it to Arrow hold the interpreter; encoding it (pyarrow) lets
    go of it. So the tables are checked and converted a chunk at a time on a thread of their
    own, a chunk ahead of the encoder here: the two overlap, with two chunks in memory.
    """
    (directory / "meta.json").write_text(trace.meta.model_dump_json(indent=2) + "\n")
    files = table_files or {}
    chunks = produced_ahead(_table_chunks(trace, files, validate=validate, source=source))
    writer: pq.ParquetWriter | None = None
    try:
        for table, chunk in chunks:
            path = directory / f"{table}.parquet"
            if chunk is None:  # given as a file, or as a function that writes it
                source_file = files[table]
                if isinstance(source_file, Path):
                    link_or_copy(source_file, path)
                else:
                    source_file(path)
            elif chunk.whole:
                pq.write_table(chunk.rows, path)
            else:
                if chunk.first:
                    writer = pq.ParquetWriter(path, chunk.rows.schema)
                assert writer is not None
                writer.write_table(chunk.rows)
                if chunk.last:
                    writer.close()
                    writer = None
    finally:
        if writer is not None:
            writer.close()


@dataclass(frozen=True)
class _Chunk:
    """Rows of one table as Arrow, and where they fall in it."""

    rows: pa.Table
    first: bool
    last: bool

    @property
    def whole(self) -> bool:
        return self.first and self.last


def _table_chunks(
    trace: Trace, files: Mapping[str, TableFile], *, validate: bool, source: str | None
) -> Iterator[tuple[str, _Chunk | None]]:
    """Every table in order, as (name, chunk) a chunk of ROWS_PER_CHUNK rows at a time (one
    chunk for a table of no more rows); (name, None) for a table in `files`.

    A long table other than the steps is checked a chunk at a time too (its rows are checked
    each on its own, and a problem names its row in the whole table): the checked copy of an
    eight-million-row resize table would otherwise be held whole, over a gigabyte. The steps
    are checked whole (their order is checked across rows)."""
    for table, model in TABLES.items():
        if table in files:
            yield table, None
            continue
        df = trace.table(table)
        by_chunk = validate and table != "steps" and len(df) > ROWS_PER_CHUNK
        if validate and not by_chunk:
            df = validate_frame(df, model, table=table, source=source, keep_text=True)
        schema = arrow_schema(model)
        starts = range(0, len(df), ROWS_PER_CHUNK) if len(df) > ROWS_PER_CHUNK else range(1)
        for lo in starts:
            if by_chunk:
                hi = min(lo + ROWS_PER_CHUNK, len(df))
                part = validate_frame(
                    df.iloc[lo:hi],
                    model,
                    table=table,
                    source=source,
                    positions=np.arange(lo, hi),
                    keep_text=True,
                )
                rows = _chunk_table(part, 0, model, schema)
            else:
                rows = _chunk_table(df, lo, model, schema)
            yield table, _Chunk(rows, first=lo == 0, last=lo + ROWS_PER_CHUNK >= len(df))


def _read_parquet_table(path: Path) -> pd.DataFrame:
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise unreadable(path, err) from None
    check_plain_types(table.schema, path)
    return arrow_frame(table)


def read_parquet_dir(directory: Path, *, lenient: bool, samples_as_lengths: bool = False) -> Trace:
    """The trace in `directory`; with `samples_as_lengths`, the samples are read a block at a
    time into their lengths alone, or checked and left in the file where it is clean and in
    order (`Trace.sample_lengths`, see traces/sample_lengths.py)."""
    steps_path = directory / "steps.parquet"
    if not steps_path.exists():
        raise TraceError("not a trace directory: steps.parquet is missing", source=str(directory))
    skipped: list[SkippedRow] = []
    frames = {}
    lengths, orphans = None, None
    samples_file = directory / "samples.parquet"
    for table, model in TABLES.items():
        file = directory / f"{table}.parquet"
        if table == "samples" and samples_as_lengths and file.exists():
            frames[table] = empty_frame(model)
            lengths, orphans = read_sample_lengths(
                file,
                step_ids=frames["steps"]["step"].to_numpy(np.int64),
                lenient=lenient,
                skipped=skipped,
                stream=True,
            )
            continue
        if not file.exists():
            frames[table] = empty_frame(model)
            continue
        frames[table] = validate_frame(
            _read_parquet_table(file),
            model,
            table=table,
            source=str(file),
            lenient=lenient,
            skipped=skipped,
        )
    meta = _read_meta_file(directory / "meta.json", source_path=str(directory))
    read_notes = check_step_numbering(frames["steps"], source=str(steps_path), lenient=lenient)
    if orphans is not None:
        read_notes += orphans.settle(source=str(samples_file), lenient=lenient)
    else:
        frames["samples"], orphan_notes = drop_orphan_samples(
            frames["samples"], frames["steps"], source=str(samples_file), lenient=lenient
        )
        read_notes += orphan_notes
    if read_notes:
        meta = meta.model_copy(update={"notes": [*meta.notes, *read_notes]})
    # The tables are numpy and Python objects now; Arrow's allocator would otherwise keep the
    # pages of their Arrow buffers (hundreds of MB at a million steps) for later reads.
    pa.default_memory_pool().release_unused()
    return Trace(meta=meta, skipped=skipped, sample_lengths=lengths, **frames)


def read_parquet_steps_file(path: Path, *, lenient: bool) -> Trace:
    skipped: list[SkippedRow] = []
    steps = validate_frame(
        _read_parquet_table(path),
        StepRecord,
        table="steps",
        source=str(path),
        lenient=lenient,
        skipped=skipped,
    )
    read_notes = check_step_numbering(steps, source=str(path), lenient=lenient)
    meta = RunMeta(
        source_path=str(path), notes=["single steps table: no run metadata", *read_notes]
    )
    return Trace(meta=meta, steps=steps, skipped=skipped)


def _read_meta_file(path: Path, *, source_path: str) -> RunMeta:
    if not path.exists():
        return RunMeta(source_path=source_path, notes=["meta.json absent: no run metadata"])
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise TraceError(f"malformed JSON: {err}", source=str(path)) from None
    if not isinstance(raw, dict):
        raise TraceError("expected a JSON object", source=str(path))
    return meta_from_dict(raw, source=str(path), line=None, source_path=source_path)
