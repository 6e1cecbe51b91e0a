"""Reading and writing traces: a `Trace` in memory, Parquet and JSONL on disk.

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

import io
import json
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq
from pydantic import BaseModel, ValidationError

from .errors import TraceError, first_validation_problem
from .schema import (
    DecisionRecord,
    ExtraMetricRecord,
    ResizePhaseRecord,
    RunMeta,
    SampleRecord,
    StepRecord,
)
from .staged_dir import staged_dir, write_file_atomically
from .validation import (
    ColumnKind,
    SkippedRow,
    column_specs,
    empty_frame,
    summarize_skipped,
    validate_frame,
)
from .workload import Workload
from .workload_inference import infer_workload, inference_notes

TABLES: dict[str, type[BaseModel]] = {
    "steps": StepRecord,
    "resizes": ResizePhaseRecord,
    "decisions": DecisionRecord,
    "samples": SampleRecord,
    "extras": ExtraMetricRecord,
}
"""Table name -> record type; also the Parquet file stems."""

RECORD_TAGS: dict[str, str] = {
    "step": "steps",
    "resize": "resizes",
    "decision": "decisions",
    "sample": "samples",
    "extra": "extras",
}
"""JSONL `record` tag -> table name (`meta` is the run metadata)."""

_TAG_OF_TABLE = {table: tag for tag, table in RECORD_TAGS.items()}
_MODEL_TAG = {model: _TAG_OF_TABLE[table] for table, model in TABLES.items()}


@dataclass
class Trace:
    """One run: its metadata and one DataFrame per table, columns as in traces/schema.py."""

    meta: RunMeta = field(default_factory=RunMeta)
    steps: pd.DataFrame = field(default_factory=lambda: empty_frame(StepRecord))
    resizes: pd.DataFrame = field(default_factory=lambda: empty_frame(ResizePhaseRecord))
    decisions: pd.DataFrame = field(default_factory=lambda: empty_frame(DecisionRecord))
    samples: pd.DataFrame = field(default_factory=lambda: empty_frame(SampleRecord))
    extras: pd.DataFrame = field(default_factory=lambda: empty_frame(ExtraMetricRecord))
    skipped: list[SkippedRow] = field(default_factory=list)
    """Rows lenient reading dropped (empty after a strict read)."""

    @classmethod
    def from_records(
        cls, meta: RunMeta | None = None, records: list[BaseModel] | tuple = ()
    ) -> Trace:
        """Build a trace from schema records of any table, in the order given."""
        rows: dict[str, list[dict]] = {t: [] for t in TABLES}
        for rec in records:
            tag = _MODEL_TAG.get(type(rec))
            if tag is None:
                raise TypeError(f"not a trace record: {type(rec).__name__}")
            rows[RECORD_TAGS[tag]].append(rec.model_dump(mode="json"))
        frames = {
            t: validate_frame(pd.DataFrame(r), TABLES[t], table=t) if r else empty_frame(TABLES[t])
            for t, r in rows.items()
        }
        return cls(meta=meta or RunMeta(), **frames)

    def table(self, name: str) -> pd.DataFrame:
        return getattr(self, name)

    def validated(self, *, source: str | None = None) -> Trace:
        """The same trace with every table checked and in canonical dtypes (raises TraceError)."""
        frames = {
            t: validate_frame(self.table(t), TABLES[t], table=t, source=source) for t in TABLES
        }
        return Trace(meta=self.meta, skipped=list(self.skipped), **frames)

    def skipped_summary(self) -> str:
        return summarize_skipped(self.skipped)

    def workload_notes(self) -> list[str]:
        """What `to_workload` has to infer because the trace lacks per-sample lengths."""
        return inference_notes(self.steps, self.samples)

    def to_workload(self) -> Workload:
        """Per-sample lengths of every step, in step order; inferred where not recorded.

        Steps without sample records get lengths synthesized from their recorded statistics;
        `workload_notes()` says exactly what was synthesized.
        """
        return infer_workload(self.steps, self.samples, name=self._name()).workload

    def _name(self) -> str:
        return Path(self.meta.source_path).stem if self.meta.source_path else self.meta.source


# --- writing ------------------------------------------------------------------------------


def write_trace(path: str | os.PathLike, trace: Trace) -> Path:
    """Validate and write a trace: JSONL if `path` ends in .jsonl, else a Parquet directory.

    The old content at `path`, if any, is replaced only once the new one is complete.
    """
    path = Path(path)
    checked = trace.validated(source=str(path))
    if path.suffix == ".jsonl":
        write_file_atomically(path, lambda f: _write_jsonl_body(f, checked))
    elif path.suffix == ".parquet":
        raise TraceError(
            "a trace is written as a directory of Parquet files (or .jsonl); "
            "give a directory path without the .parquet suffix",
            source=str(path),
        )
    else:
        _atomic_dir(path, lambda d: _write_parquet_dir(d, checked))
    return path


def _write_jsonl_body(f, trace: Trace) -> None:
    f.write(_json_line({"record": "meta", **trace.meta.model_dump(mode="json")}))
    for table, model in TABLES.items():
        head = f'{{"record":"{_TAG_OF_TABLE[table]}",'
        specs = column_specs(model)
        keys = [f'"{s.name}":' for s in specs]
        tokens = [_json_tokens(trace.table(table)[s.name], s.kind) for s in specs]
        for row in zip(*tokens, strict=True):
            f.write(head + ",".join([k + t for k, t in zip(keys, row, strict=True)]) + "}\n")


def _json_tokens(col: pd.Series, kind: ColumnKind) -> list[str]:
    """A validated column as JSON text, value by value: the same text `json.dumps` writes for
    each (finite floats by repr, text escaped by json), without building a dict per row."""
    values = _plain_column(col, kind)
    if kind is ColumnKind.INT:
        return ["null" if v is None else str(int(v)) for v in values]
    if kind is ColumnKind.FLOAT:
        return ["null" if v is None else repr(float(v)) for v in values]
    if kind is ColumnKind.BOOL:
        return ["true" if v else "false" for v in values]
    return [json.dumps(v, separators=(",", ":")) for v in values]


def _plain_column(col: pd.Series, kind: ColumnKind) -> list:
    """A column as Python values, nulls as None, converted in bulk rather than per value."""
    if kind is ColumnKind.ROLES:
        return [[str(x) for x in v] for v in col.tolist()]
    if not col.isna().any():
        return col.to_numpy().tolist()
    return col.astype(object).where(col.notna(), None).tolist()


def _json_line(obj: dict) -> str:
    return json.dumps(obj, allow_nan=False, separators=(",", ":")) + "\n"


def _arrow_schema(model: type[BaseModel]) -> pa.Schema:
    types = {
        ColumnKind.INT: pa.int64(),
        ColumnKind.FLOAT: pa.float64(),
        ColumnKind.BOOL: pa.bool_(),
        ColumnKind.STR: pa.string(),
        ColumnKind.ROLES: pa.list_(pa.string()),
    }
    return pa.schema([pa.field(s.name, types[s.kind], nullable=True) for s in column_specs(model)])


def _write_parquet_dir(directory: Path, trace: Trace) -> None:
    (directory / "meta.json").write_text(trace.meta.model_dump_json(indent=2) + "\n")
    for table, model in TABLES.items():
        df = trace.table(table)
        arrays = {}
        schema = _arrow_schema(model)
        for spec, fld in zip(column_specs(model), schema, strict=True):
            arrays[spec.name] = pa.array(_plain_column(df[spec.name], spec.kind), type=fld.type)
        pq.write_table(pa.table(arrays, schema=schema), directory / f"{table}.parquet")


def _atomic_dir(path: Path, write_body) -> None:
    if path.exists() and not path.is_dir():
        raise TraceError("exists and is not a directory", source=str(path))
    with staged_dir(path, replace=True) as staging:
        write_body(staging)


# --- reading ------------------------------------------------------------------------------


def read_trace(path: str | os.PathLike, *, lenient: bool = False) -> Trace:
    """Read and validate a trace written by `write_trace` or `JsonlTraceWriter`.

    Strict by default: the first problem raises TraceError naming file, line or row, and field.
    With `lenient=True` bad rows are dropped and listed in `Trace.skipped`.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(2, "No such file or directory", str(path))
    if path.is_dir():
        trace = _read_parquet_dir(path, lenient=lenient)
    elif path.suffix == ".parquet":
        trace = _read_parquet_steps_file(path, lenient=lenient)
    else:
        trace = _read_jsonl(path, lenient=lenient)
    if trace.steps.empty:
        detail = f" ({trace.skipped_summary()})" if trace.skipped else ""
        raise TraceError(f"no valid step records{detail}", source=str(path))
    return trace


_ALLOWED_ARROW = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_boolean,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_null,
)


def _plain_arrow_type(t: pa.DataType) -> bool:
    if any(check(t) for check in _ALLOWED_ARROW):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)
    return False


def _read_parquet_table(path: Path) -> pd.DataFrame:
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise TraceError(
            f"not a readable Parquet file (truncated or corrupt?): {err}", source=str(path)
        ) from None
    columns = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        if not _plain_arrow_type(column.type):
            raise TraceError(
                f"column type {column.type} is not allowed in a trace", source=str(path), field=name
            )
        columns[name] = pd.Series(column.to_numpy(zero_copy_only=False), dtype=None)
    return pd.DataFrame(columns, index=pd.RangeIndex(table.num_rows))


def _read_parquet_dir(directory: Path, *, lenient: bool) -> Trace:
    steps_path = directory / "steps.parquet"
    if not steps_path.exists():
        raise TraceError("not a trace directory: steps.parquet is missing", source=str(directory))
    skipped: list[SkippedRow] = []
    frames = {}
    for table, model in TABLES.items():
        file = directory / f"{table}.parquet"
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
    return Trace(meta=meta, skipped=skipped, **frames)


def _read_parquet_steps_file(path: Path, *, lenient: bool) -> Trace:
    skipped: list[SkippedRow] = []
    steps = validate_frame(
        _read_parquet_table(path),
        StepRecord,
        table="steps",
        source=str(path),
        lenient=lenient,
        skipped=skipped,
    )
    meta = RunMeta(source_path=str(path), notes=["single steps table: no run metadata"])
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
    return _meta_from_dict(raw, source=str(path), line=None, source_path=source_path)


def _meta_from_dict(raw: dict, *, source: str, line: int | None, source_path: str) -> RunMeta:
    try:
        meta = RunMeta.model_validate(raw)
    except ValidationError as err:
        raise first_validation_problem(err, source=source, line=line) from None
    if meta.schema_version != RunMeta().schema_version:
        raise TraceError(
            f"unknown schema version {meta.schema_version}",
            source=source,
            line=line,
            field="schema_version",
        )
    return meta if meta.source_path else meta.model_copy(update={"source_path": source_path})


_CANONICAL_PREFIX = {f'{{"record":"{tag}",'.encode(): table for tag, table in RECORD_TAGS.items()}
"""How `write_trace` and `JsonlTraceWriter` start a record line; such lines are parsed in bulk."""


def _read_jsonl(path: Path, *, lenient: bool) -> Trace:
    """Lines as the project writes them are parsed in bulk by Arrow, table by table; any line
    or table that does not go through cleanly is parsed line by line with `json`, which is what
    decides every error message, so both paths accept and reject exactly the same files."""
    source = str(path)
    rows: dict[str, list[dict]] = {t: [] for t in TABLES}
    lines: dict[str, list[int]] = {t: [] for t in TABLES}
    canonical: dict[str, list[tuple[int, bytes]]] = {t: [] for t in TABLES}
    skipped: list[SkippedRow] = []
    meta: list[RunMeta] = []
    seen_any = False

    def bad(line_no: int, table: str, fld: str | None, reason: str) -> None:
        if not lenient:
            raise TraceError(reason, source=source, line=line_no, field=fld)
        skipped.append(SkippedRow(table, f"line {line_no}", fld, reason))

    def take(line_no: int, raw_line: bytes) -> None:
        obj = _parse_json_line(raw_line)
        if isinstance(obj, str):
            bad(line_no, "?", None, obj)
            return
        tag = obj.pop("record", None)
        if tag == "meta":
            if meta:
                bad(line_no, "meta", "record", "a second meta record")
                return
            meta.append(_meta_from_dict(obj, source=source, line=line_no, source_path=source))
            return
        table = RECORD_TAGS.get(tag) if isinstance(tag, str) else None
        if table is None:
            hint = (
                " (this looks like verl's file logger: read it with "
                "dynaresize.traces.importers.import_trace)"
                if tag is None and {"step", "data"} <= obj.keys()
                else ""
            )
            bad(
                line_no,
                "?",
                "record",
                f"unknown record type {tag!r}; expected one of {['meta', *RECORD_TAGS]}" + hint,
            )
            return
        problem = _key_problem(obj, TABLES[table])
        if problem is not None:
            bad(line_no, table, *problem)
            return
        rows[table].append(obj)
        lines[table].append(line_no)

    with open(path, "rb") as f:
        for line_no, raw_line in enumerate(f, start=1):
            if not raw_line.strip():
                continue
            seen_any = True
            table = _CANONICAL_PREFIX.get(raw_line[: raw_line.find(b",") + 1])
            if table is not None:
                canonical[table].append((line_no, raw_line))
            else:
                take(line_no, raw_line)
    if not seen_any:
        raise TraceError("empty file: no records", source=source)
    frames = {}
    for table, model in TABLES.items():
        bulk = None if rows[table] else _bulk_frame(canonical[table], model, table, source)
        if bulk is not None:
            frames[table] = bulk
            continue
        for line_no, raw_line in canonical[table]:
            take(line_no, raw_line)
        order = np.argsort(lines[table], kind="stable")
        df = pd.DataFrame([rows[table][i] for i in order]) if rows[table] else empty_frame(model)
        frames[table] = validate_frame(
            df,
            model,
            table=table,
            source=source,
            unit="line",
            positions=np.asarray(lines[table])[order],
            lenient=lenient,
            skipped=skipped,
        )
    first_meta = (
        meta[0] if meta else RunMeta(source_path=source, notes=["no meta record: no run metadata"])
    )
    return Trace(meta=first_meta, skipped=skipped, **frames)


def _bulk_frame(
    records: list[tuple[int, bytes]], model: type[BaseModel], table: str, source: str
) -> pd.DataFrame | None:
    """One table's canonical lines parsed by Arrow and validated strictly; None whenever
    anything is off (the caller then reads those lines one by one and reports precisely)."""
    if not records:
        return None
    names, required = _key_sets(model)
    try:
        parsed = pa_json.read_json(
            io.BytesIO(b"".join(raw if raw.endswith(b"\n") else raw + b"\n" for _, raw in records))
        )
    except (pa.ArrowException, OSError):
        return None
    columns = {}
    for name, column in zip(parsed.column_names, parsed.columns, strict=True):
        if name == "record":
            continue
        if name not in names or not _plain_arrow_type(column.type):
            return None
        if name in required and column.null_count:
            return None
        columns[name] = pd.Series(column.to_numpy(zero_copy_only=False), dtype=None)
    if parsed.num_rows != len(records) or not required <= columns.keys():
        return None
    try:
        return validate_frame(
            pd.DataFrame(columns, index=pd.RangeIndex(parsed.num_rows)),
            model,
            table=table,
            source=source,
        )
    except TraceError:
        return None


def _parse_json_line(raw_line: bytes) -> dict | str:
    """The line's JSON object, or a string saying why it is not one."""
    try:
        obj = json.loads(raw_line)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return (
            f"malformed JSON ({err.msg} at column {getattr(err, 'colno', '?')})"
            if isinstance(err, json.JSONDecodeError)
            else "not UTF-8 text"
        )
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {type(obj).__name__}"
    return obj


@cache
def _key_sets(model: type[BaseModel]) -> tuple[frozenset[str], frozenset[str]]:
    specs = column_specs(model)
    return frozenset(s.name for s in specs), frozenset(s.name for s in specs if s.required)


def _key_problem(obj: dict, model: type[BaseModel]) -> tuple[str, str] | None:
    names, required = _key_sets(model)
    keys = obj.keys()
    if keys <= names and required <= keys:
        return None
    for key in obj:
        if key not in names:
            return key, "unknown field"
    missing = sorted(required - keys)
    return missing[0], "missing (required)"


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
        tag = _MODEL_TAG.get(type(record))
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
        self._file.write(_json_line(obj))
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
