"""The JSONL format: one JSON object per line, tagged by `"record"`.

Lines as the project writes them are parsed in bulk by Arrow, table by table; any line or table
that does not go through cleanly is parsed line by line with `json`, which decides every error
message, so both paths accept and reject exactly the same files.
"""

from __future__ import annotations

import io
import json
import math
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pa_json
from pydantic import BaseModel

from .errors import TraceError
from .schema import RunMeta
from .trace import (
    RECORD_TAGS,
    TABLES,
    TAG_OF_TABLE,
    Trace,
    meta_from_dict,
    plain_arrow_type,
    plain_column,
)
from .validation import (
    ColumnKind,
    SkippedRow,
    check_step_numbering,
    column_specs,
    drop_orphan_samples,
    empty_frame,
    validate_frame,
)


def write_jsonl_body(f, trace: Trace) -> None:
    f.write(json_line({"record": "meta", **trace.meta.model_dump(mode="json")}))
    for table, model in TABLES.items():
        head = f'{{"record":"{TAG_OF_TABLE[table]}",'
        specs = column_specs(model)
        keys = [f'"{s.name}":' for s in specs]
        tokens = [_json_tokens(trace.table(table)[s.name], s.kind) for s in specs]
        for row in zip(*tokens, strict=True):
            f.write(head + ",".join([k + t for k, t in zip(keys, row, strict=True)]) + "}\n")


def _json_tokens(col: pd.Series, kind: ColumnKind) -> list[str]:
    """A validated column as JSON text, value by value: the same text `json.dumps` writes for
    each (finite floats by repr, text escaped by json), without building a dict per row."""
    values = plain_column(col, kind)
    if kind is ColumnKind.INT:
        return ["null" if v is None else str(int(v)) for v in values]
    if kind is ColumnKind.FLOAT:
        return ["null" if v is None else repr(float(v)) for v in values]
    if kind is ColumnKind.BOOL:
        return ["true" if v else "false" for v in values]
    return [json.dumps(v, separators=(",", ":")) for v in values]


def json_line(obj: dict) -> str:
    return json.dumps(obj, allow_nan=False, separators=(",", ":")) + "\n"


def finite_json(value: object) -> object:
    """`value` with every NaN or infinite float replaced by None (JSON null), through mappings
    and sequences: JSON has no such numbers, and a file with `NaN` in it is not JSON."""
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(item) for item in value]
    return value


def dumps_finite(value: object, *, indent: int | None = 2) -> str:
    """JSON text of `value` that any JSON reader accepts (non-finite numbers become null)."""
    return json.dumps(finite_json(value), indent=indent, allow_nan=False)


_CANONICAL_PREFIX = {f'{{"record":"{tag}",'.encode(): table for tag, table in RECORD_TAGS.items()}
"""How `write_trace` and `JsonlTraceWriter` start a record line; such lines are parsed in bulk."""


def read_jsonl(path: Path, *, lenient: bool) -> Trace:
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
            meta.append(meta_from_dict(obj, source=source, line=line_no, source_path=source))
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
    positions: dict[str, np.ndarray | None] = {}
    for table, model in TABLES.items():
        bulk = None if rows[table] else _bulk_frame(canonical[table], model, table, source)
        if bulk is not None:
            frames[table] = bulk
            positions[table] = np.asarray([line_no for line_no, _ in canonical[table]])
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
        # Lenient reading may have dropped rows: line numbers no longer match the frame.
        positions[table] = None if lenient else np.asarray(lines[table])[order]
    first_meta = (
        meta[0] if meta else RunMeta(source_path=source, notes=["no meta record: no run metadata"])
    )
    read_notes = check_step_numbering(
        frames["steps"], source=source, unit="line", positions=positions["steps"], lenient=lenient
    )
    frames["samples"], orphan_notes = drop_orphan_samples(
        frames["samples"],
        frames["steps"],
        source=source,
        unit="line",
        positions=positions["samples"],
        lenient=lenient,
    )
    read_notes += orphan_notes
    if read_notes:
        first_meta = first_meta.model_copy(update={"notes": [*first_meta.notes, *read_notes]})
    return Trace(meta=first_meta, skipped=skipped, **frames)


def _bulk_frame(
    records: list[tuple[int, bytes]], model: type[BaseModel], table: str, source: str
) -> pd.DataFrame | None:
    """One table's canonical lines parsed by Arrow and validated strictly; None whenever
    anything is off (the caller then reads those lines one by one and reports precisely)."""
    if not records:
        return None
    names, required = _key_sets(model)
    text = b"".join(raw if raw.endswith(b"\n") else raw + b"\n" for _, raw in records)
    try:
        # Arrow takes bytes that are not UTF-8 and fails only when it converts them later.
        text.decode("utf-8")
        parsed = pa_json.read_json(io.BytesIO(text))
    except (pa.ArrowException, OSError, UnicodeDecodeError):
        return None
    columns = {}
    for name, column in zip(parsed.column_names, parsed.columns, strict=True):
        if name == "record":
            continue
        if name not in names or not plain_arrow_type(column.type):
            return None
        if name in required and column.null_count:
            return None
        try:
            columns[name] = pd.Series(column.to_numpy(zero_copy_only=False), dtype=None)
        except (pa.ArrowException, UnicodeDecodeError, ValueError, OverflowError):
            return None
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
