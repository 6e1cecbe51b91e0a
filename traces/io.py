"""Reading and writing traces: a `Trace` in memory, Parquet and JSONL on disk.

This module is the front door (`read_trace`, `write_trace`, `JsonlTraceWriter`, and `Trace`
from traces/trace.py); the formats live in parquet_io.py and jsonl_io.py.

Formats
- Parquet (the main format): a directory holding `meta.json` and one Parquet file per table
  (`steps.parquet`, `resizes.parquet`, `decisions.parquet`, `samples.parquet`, `extras.parquet`).
  A single `.parquet` file is read as a steps table alone.
- JSONL: one JSON object per line, tagged by `"record"`: `meta`, `step`, `resize`, `decision`,
  `sample` or `extra`; the other keys are the record's fields. The live executor appends to
  such a file as it runs (`JsonlTraceWriter`) and converts it to Parquet at the end.

Everything read is validated against traces/schema.py; a problem raises TraceError naming the
file, line or row and field, or in lenient mode drops the row and records why. Nothing is ever
unpickled or evaluated: JSON is parsed by `json`, Parquet columns must be plain numbers, booleans,
text or lists of text. Writes go to a temporary sibling first and are renamed into place, so a
crash never leaves half a trace where a good one was.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from .errors import TraceError
from .jsonl_io import json_line, read_jsonl, write_jsonl_body
from .parquet_io import TableFile, read_parquet_dir, read_parquet_steps_file, write_parquet_dir
from .schema import RunMeta, StepRecord
from .staged_dir import staged_dir, write_file_atomically
from .trace import TABLES, TAG_OF_MODEL, Trace

__all__ = ["TABLES", "JsonlTraceWriter", "TableFile", "Trace", "read_trace", "write_trace"]


# --- writing ------------------------------------------------------------------------------


def write_trace(
    path: str | os.PathLike, trace: Trace, *, table_files: Mapping[str, TableFile] | None = None
) -> Path:
    """Validate and write a trace: JSONL if `path` ends in .jsonl, else a Parquet directory.

    The old content at `path`, if any, is replaced only once the new one is complete.
    `table_files` gives tables of a Parquet directory not built from the trace's frame: a file
    to copy (a table written once for several folders), or a function writing it at the path
    it is given (a table written straight from its source).
    """
    path = Path(path)
    table_files = table_files or {}
    if table_files and (path.suffix == ".jsonl" or not set(table_files) <= set(TABLES)):
        raise ValueError(f"table_files {sorted(table_files)}: only tables of a Parquet directory")
    if path.suffix == ".jsonl":
        checked = trace.validated(source=str(path))
        write_file_atomically(path, lambda f: write_jsonl_body(f, checked))
    elif path.suffix == ".parquet":
        raise TraceError(
            "a trace is written as a directory of Parquet files (or .jsonl); "
            "give a directory path without the .parquet suffix",
            source=str(path),
        )
    else:
        # Each table is checked as it is written (Parquet takes pandas text columns as they
        # are: no round trip through Python strings); a bad one stops the write, and the
        # staging folder leaves nothing behind.
        _atomic_dir(
            path,
            lambda d: write_parquet_dir(
                d, trace, table_files=table_files, validate=True, source=str(path)
            ),
        )
    return path


def _atomic_dir(path: Path, write_body) -> None:
    if path.exists() and not path.is_dir():
        raise TraceError("exists and is not a directory", source=str(path))
    with staged_dir(path, replace=True) as staging:
        write_body(staging)


# --- reading ------------------------------------------------------------------------------


def read_trace(
    path: str | os.PathLike, *, lenient: bool = False, samples_as_lengths: bool = False
) -> Trace:
    """Read and validate a trace written by `write_trace` or `JsonlTraceWriter`.

    Strict by default: the first problem raises TraceError naming file, line or row, and field.
    With `lenient=True` bad rows are dropped and listed in `Trace.skipped`. With
    `samples_as_lengths`, a Parquet directory's samples are read into `Trace.sample_lengths`
    a block at a time instead of a frame (what a replay needs, in a fraction of the memory).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(2, "No such file or directory", str(path))
    if path.is_dir():
        trace = read_parquet_dir(path, lenient=lenient, samples_as_lengths=samples_as_lengths)
    elif path.suffix == ".parquet":
        trace = read_parquet_steps_file(path, lenient=lenient)
    else:
        trace = read_jsonl(path, lenient=lenient)
    if trace.steps.empty:
        detail = f" ({trace.skipped_summary()})" if trace.skipped else ""
        raise TraceError(f"no valid step records{detail}", source=str(path))
    return trace


# --- appending, for live runs -------------------------------------------------------------


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def _last_step_in(path: Path) -> int | None:
    """Highest step of the complete step records already in a JSONL trace (resuming a run)."""
    last = None
    with open(path, "rb") as f:
        for raw in f:
            if b'"step"' not in raw:
                continue
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(obj, dict) and obj.get("record") == "step":
                step = obj.get("step")
                if isinstance(step, int) and (last is None or step > last):
                    last = step
    return last


class JsonlTraceWriter:
    """Appends records to a JSONL trace, one line each, flushed and fsynced as written.

    A live run killed at any point leaves a file whose complete lines are all readable; only a
    line cut mid-write can be lost (lenient reading skips it). `finish(parquet_dir)` converts the
    file to the Parquet format when the run ends.
    """

    def __init__(
        self, path: str | os.PathLike, *, meta: RunMeta | None = None, fsync: bool = True
    ) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        self._last_step: int | None = None if fresh else _last_step_in(self.path)
        cut_line = not fresh and not _ends_with_newline(self.path)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        if cut_line:  # a crash cut the last line: keep new records off it
            self._file.write("\n")
        if fresh:
            meta = meta or RunMeta()
            self._append({"record": "meta", **meta.model_dump(mode="json")})

    def write(self, record: BaseModel) -> None:
        """Append one schema record (StepRecord, ResizePhaseRecord, DecisionRecord, ...)."""
        tag = TAG_OF_MODEL.get(type(record))
        if tag is None:
            raise TypeError(f"not a trace record: {type(record).__name__}")
        if isinstance(record, StepRecord):
            if self._last_step is not None and record.step <= self._last_step:
                raise TraceError(
                    f"steps out of order: step {record.step} after step {self._last_step}",
                    source=str(self.path),
                    field="step",
                )
            self._last_step = record.step
        self._append({"record": tag, **record.model_dump(mode="json")})

    def _append(self, obj: dict) -> None:
        if self._file.closed:
            raise ValueError(f"{self.path}: writer is closed")
        self._file.write(json_line(obj))
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def finish(self, parquet_dir: str | os.PathLike) -> Path:
        """Close, re-read strictly, and write the Parquet trace directory."""
        self.close()
        return write_trace(parquet_dir, read_trace(self.path))

    def __enter__(self) -> JsonlTraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
