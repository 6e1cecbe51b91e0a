"""A trace's samples read a block of rows at a time into the per-sample lengths a replay needs.

A long run's samples table holds tens of millions of rows; read whole into pandas it takes
several bytes of memory per value and seconds per column. A replay needs only each sample's
prompt and response lengths in (step, sample_index) order, so `read_sample_lengths` reads the
file a block of rows at a time, checks every column of the block (a block found clean is clean:
an integer column by its least and greatest values, a float column by numpy; any other goes
through `validate_frame`, which names the row and field exactly as a whole read would) and keeps
the two lengths and the run of samples of each step.

With `stream`, a file found clean, in order and holding only samples of the trace's steps is
not held at all: the read checks it and keeps the run of samples of each step, and the lengths
stay in the file, read again a block at a time when needed (`traces.workload_stream`). Any other
file (out of order, rows dropped by lenient reading, samples of unknown steps) is read into its
lengths as above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .arrow_frame import arrow_frame, check_plain_types, unreadable
from .column_specs import ColumnKind, ColumnSpec, column_specs, upper_bound
from .errors import TraceError
from .kept_lengths import SampleLengths, StreamedSamples
from .schema import SCHEMA_VERSION, SampleRecord
from .validation import SkippedRow, validate_frame
from .workload_stream import WorkloadStream

__all__ = [
    "SAMPLE_BLOCK_ROWS",
    "OrphanSamples",
    "SampleLengths",
    "StreamedSamples",
    "read_sample_lengths",
]

SAMPLE_BLOCK_ROWS = 1 << 20
"""Rows of the samples file read and checked at a time."""

_KEPT = ("step", "sample_index", "prompt_tokens", "response_tokens")


@dataclass
class OrphanSamples:
    """Samples of steps the trace has no record of: their count, first row and steps."""

    count: int = 0
    first_row: int | None = None
    first_step: int | None = None
    steps: set[int] = field(default_factory=set)

    def settle(self, *, source: str, lenient: bool) -> list[str]:
        """Raise at the first orphan (strict), or the note saying what was dropped (lenient),
        worded as `step_consistency.drop_orphan_samples` words them."""
        if not self.count:
            return []
        if not lenient:
            raise TraceError(
                f"a sample of step {self.first_step}, which has no step record in the trace",
                source=source,
                field="step",
                row=self.first_row,
            )
        return [
            f"{self.count} samples of {len(self.steps)} step(s) without a step record "
            f"(first: step {min(self.steps)}) were dropped"
        ]


def _numeric_clean(column: pa.ChunkedArray, spec: ColumnSpec) -> bool:
    """Whether `validate_frame` would accept this numeric column as it is (conservative)."""
    t = column.type
    if pa.types.is_null(t):
        return spec.nullable
    signed_int = pa.types.is_signed_integer(t)
    if not (signed_int or (spec.kind is ColumnKind.FLOAT and pa.types.is_floating(t))):
        return False
    if column.null_count and not spec.nullable:
        return False
    if signed_int:
        return _integers_clean(column, spec)
    nums = column.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    finite = np.isfinite(nums)
    if np.isinf(nums).any():
        return False
    if not spec.nullable and not finite.all():
        return False
    if spec.ge is not None and (finite & (nums < spec.ge)).any():
        return False
    limit, _ = upper_bound(spec.name)
    if (finite & (nums > limit)).any():
        return False
    return spec.name != "schema_version" or bool((nums == SCHEMA_VERSION).all())


def _integers_clean(column: pa.ChunkedArray, spec: ColumnSpec) -> bool:
    """`_numeric_clean` of a signed-integer column from its least and greatest values (the
    checks compare values as float64, and the conversion keeps their order): integers are
    finite, and nulls, already refused where the column takes none, are skipped by both."""
    extremes = pc.min_max(column).as_py()
    least, greatest = extremes["min"], extremes["max"]
    if least is not None:  # None: no values, or only nulls
        if spec.ge is not None and float(least) < spec.ge:
            return False
        limit, _ = upper_bound(spec.name)
        if float(greatest) > limit:
            return False
    if spec.name != "schema_version":
        return True
    return not column.null_count and (
        least is None or float(least) == float(greatest) == SCHEMA_VERSION
    )


def _block_clean(block: pa.Table, specs: tuple[ColumnSpec, ...]) -> bool:
    """Whether every column of the block passes as `validate_frame` checks it; False means
    only "look closer": the block then goes through `validate_frame` itself."""
    for spec in specs:
        if spec.name not in block.column_names:
            continue
        column = block.column(spec.name)
        if spec.kind in (ColumnKind.INT, ColumnKind.FLOAT):
            if not _numeric_clean(column, spec):
                return False
        elif spec.kind is ColumnKind.STR and spec.choices is None and spec.nullable:
            t = column.type
            if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)):
                return False
        else:
            return False
    return True


def _kept_columns(
    block: pa.Table,
    specs: tuple[ColumnSpec, ...],
    *,
    first_row: int,
    source: str,
    lenient: bool,
    skipped: list[SkippedRow],
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(file rows, step) and the kept columns of the block's valid rows, as int64."""
    rows = np.arange(first_row, first_row + block.num_rows, dtype=np.int64)
    if _block_clean(block, specs):
        kept = [block.column(c).to_numpy().astype(np.int64, copy=False) for c in _KEPT]
        return rows, kept[0], kept
    frame = validate_frame(
        arrow_frame(block),
        SampleRecord,
        table="samples",
        source=source,
        positions=rows,
        lenient=lenient,
        skipped=skipped,
    )
    if len(frame) < block.num_rows:  # lenient reading dropped rows: which ones is not kept
        rows = np.full(len(frame), -1, dtype=np.int64)
    kept = [frame[c].to_numpy(np.int64) for c in _KEPT]
    return rows, kept[0], kept


def read_sample_lengths(
    path: Path,
    *,
    step_ids: np.ndarray,
    lenient: bool,
    skipped: list[SkippedRow],
    stream: bool = False,
) -> tuple[SampleLengths | StreamedSamples, OrphanSamples]:
    """The samples file's lengths (see the module doc); samples of steps not in `step_ids`
    are left out and described in the second value, for the caller to refuse or note. With
    `stream`, a clean file in order comes back as `StreamedSamples`, its lengths left in it."""
    source = str(path)
    try:
        parquet = pq.ParquetFile(path)
        check_plain_types(parquet.schema_arrow, path)
        specs = column_specs(SampleRecord)
        _check_columns(parquet.schema_arrow.names, specs, source, parquet.metadata.num_rows)
        if stream:
            runs = _stream_runs(parquet, specs, step_ids=step_ids, source=source, lenient=lenient)
            if runs is not None:
                ids, counts = runs
                streamed = StreamedSamples(ids, WorkloadStream.of_counts(path, counts))
                return streamed, OrphanSamples()
        found: list[SkippedRow] = []
        read = _read_blocks(
            parquet, specs, step_ids=step_ids, source=source, lenient=lenient, skipped=found
        )
        if read is None:  # not in (step, sample_index) order: read again keeping the keys
            found = []
            read = _read_blocks(
                parquet,
                specs,
                step_ids=step_ids,
                source=source,
                lenient=lenient,
                skipped=found,
                keep_keys=True,
            )
        assert read is not None
        lengths, orphans = read
        skipped.extend(found)
    except (pa.ArrowException, OSError) as err:
        raise unreadable(path, err) from None
    return lengths, orphans


def _check_columns(names: list[str], specs, source: str, num_rows: int) -> None:
    known = {s.name for s in specs}
    unknown = [c for c in names if c not in known]
    if unknown:
        raise TraceError(
            f"unknown column(s) {unknown} for table 'samples'", source=source, field=unknown[0]
        )
    missing = [s.name for s in specs if s.required and s.name not in names]
    if missing and num_rows:
        raise TraceError(
            "required column missing from table 'samples'", source=source, field=missing[0]
        )


def _read_blocks(
    parquet: pq.ParquetFile,
    specs: tuple[ColumnSpec, ...],
    *,
    step_ids: np.ndarray,
    source: str,
    lenient: bool,
    skipped: list[SkippedRow],
    keep_keys: bool = False,
) -> tuple[SampleLengths, OrphanSamples] | None:
    """The lengths, or None (without `keep_keys`) on finding the samples out of order."""
    total = parquet.metadata.num_rows
    prompt = np.empty(total, dtype=np.int64)
    response = np.empty(total, dtype=np.int64)
    order_keys: list[tuple[np.ndarray, np.ndarray]] = []
    runs = _OrderedRuns()
    orphans = OrphanSamples()
    filled, first_row = 0, 0
    for batch in parquet.iter_batches(batch_size=SAMPLE_BLOCK_ROWS):
        block = pa.Table.from_batches([batch])
        rows, step, (_, index, p, r) = _kept_columns(
            block, specs, first_row=first_row, source=source, lenient=lenient, skipped=skipped
        )
        first_row += block.num_rows
        known = np.isin(step, step_ids)
        if not known.all():
            _note_orphans(orphans, step, rows, known)
            step, index, p, r = step[known], index[known], p[known], r[known]
        n = len(step)
        if n == 0:
            continue
        prompt[filled : filled + n], response[filled : filled + n] = p, r
        filled += n
        if keep_keys:
            order_keys.append((step, index))
        elif not runs.add(step, index):
            return None
    prompt, response = prompt[:filled], response[:filled]
    if not keep_keys:
        ids, counts = runs.merged()
        return SampleLengths(ids, counts, prompt, response), orphans
    return _sorted_lengths(order_keys, prompt, response), orphans


def _stream_runs(
    parquet: pq.ParquetFile,
    specs: tuple[ColumnSpec, ...],
    *,
    step_ids: np.ndarray,
    source: str,
    lenient: bool,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Check every block of the file (raising, when strict, at the first bad value as the held
    read does) and keep the run of samples of each step: (steps, counts). None when the file
    cannot be streamed as it is: a block out of (step, sample_index) order, a row lenient
    reading drops, a sample of a step not in `step_ids` (the held read then handles it)."""
    runs = _OrderedRuns()
    first_row = 0
    dropped: list[SkippedRow] = []
    for batch in parquet.iter_batches(batch_size=SAMPLE_BLOCK_ROWS):
        block = pa.Table.from_batches([batch])
        _, step, (_, index, _, _) = _kept_columns(
            block, specs, first_row=first_row, source=source, lenient=lenient, skipped=dropped
        )
        first_row += block.num_rows
        if dropped or len(step) < block.num_rows or not np.isin(step, step_ids).all():
            return None
        if len(step) and not runs.add(step, index):
            return None
    return runs.merged()


class _OrderedRuns:
    """The (step, count) runs of the non-empty blocks of a file read in order; `add` answers
    False at the first block out of (step, sample_index) order."""

    def __init__(self) -> None:
        self.ids: list[np.ndarray] = []
        self.counts: list[np.ndarray] = []
        self.last: tuple[int, int] | None = None

    def add(self, step: np.ndarray, index: np.ndarray) -> bool:
        if not _in_order(step, index, self.last):
            return False
        self.last = (int(step[-1]), int(index[-1]))
        ids, counts = _runs(step)
        self.ids.append(ids)
        self.counts.append(counts)
        return True

    def merged(self) -> tuple[np.ndarray, np.ndarray]:
        """Every block's runs, a step split across blocks joined into one run."""
        ids = np.concatenate(self.ids) if self.ids else np.zeros(0, np.int64)
        counts = np.concatenate(self.counts) if self.counts else np.zeros(0, np.int64)
        return _merge_runs(ids, counts)


def _note_orphans(
    orphans: OrphanSamples, step: np.ndarray, rows: np.ndarray, known: np.ndarray
) -> None:
    where = np.flatnonzero(~known)
    if orphans.first_row is None:
        orphans.first_row, orphans.first_step = int(rows[where[0]]), int(step[where[0]])
    orphans.count += len(where)
    orphans.steps.update(int(s) for s in np.unique(step[where]))


def _in_order(step: np.ndarray, index: np.ndarray, last: tuple[int, int] | None) -> bool:
    """Whether (step, sample_index) never falls within the block nor from the last block."""
    if last is not None and (int(step[0]), int(index[0])) < last:
        return False
    ds = np.diff(step)
    return bool(((ds > 0) | ((ds == 0) & (np.diff(index) >= 0))).all())


def _runs(step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts = np.flatnonzero(np.concatenate([[True], step[1:] != step[:-1]]))
    counts = np.diff(np.concatenate([starts, [len(step)]]))
    return step[starts], counts.astype(np.int64)


def _merge_runs(ids: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs of one step split across blocks joined into one."""
    if len(ids) < 2:
        return ids, counts
    new = np.concatenate([[True], ids[1:] != ids[:-1]])
    group = np.cumsum(new) - 1
    return ids[new], np.bincount(group, weights=counts).astype(np.int64)


def _sorted_lengths(
    keys: list[tuple[np.ndarray, np.ndarray]], prompt: np.ndarray, response: np.ndarray
) -> SampleLengths:
    """Samples not written in (step, sample_index) order, put in it (stable, as a sort of the
    whole table by those columns would)."""
    step = np.concatenate([k[0] for k in keys])
    index = np.concatenate([k[1] for k in keys])
    order = np.lexsort((index, step))
    ids, counts = _runs(step[order])
    return SampleLengths(ids, counts, prompt[order], response[order])
