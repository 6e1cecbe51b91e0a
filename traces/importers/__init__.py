"""Importers: logs users already have -> the project's trace format, saying what was inferred.

`import_trace(path)` detects the format: the project's own traces (a Parquet directory, a
`.parquet` steps file, a JSONL whose lines carry `"record"`), verl's file-logger JSONL
(`{"step": N, "data": {...}}`), and CSV metric tables (through a `CsvMapping`; a shipped one for
slime, OpenRLHF or AReaL is picked from the header when none is given).

Facts a foreign log lacks (GPU split, batch size, model) come from `options`, or else from a
sidecar file `<log file name>.import.json` beside the log holding the same fields, so every
command that opens the log sees them without flags.

What it may import: the rest of `dynaresize.traces`, nothing else of the project.
"""

from __future__ import annotations

import json
import os
from enum import Enum
from pathlib import Path

from pydantic import ValidationError

from ..errors import TraceError, first_validation_problem
from ..io import Trace, read_trace
from .common import ImportOptions
from .csv import CsvMapping, import_csv, read_table, resolve_column
from .mappings import SHIPPED_MAPPINGS
from .verl import import_verl, looks_like_verl

__all__ = [
    "SHIPPED_MAPPINGS",
    "CsvMapping",
    "ImportOptions",
    "TraceFormat",
    "detect_format",
    "import_trace",
    "sidecar_options",
    "sidecar_path",
]


class TraceFormat(str, Enum):
    NATIVE = "native"
    VERL = "verl"
    CSV = "csv"


def detect_format(path: str | os.PathLike) -> TraceFormat:
    """Which reader understands `path`, from its kind, suffix and first record."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(2, "No such file or directory", str(path))
    if path.is_dir() or path.suffix == ".parquet":
        return TraceFormat.NATIVE
    if path.suffix in (".csv", ".tsv"):
        return TraceFormat.CSV
    first = _first_json_object(path)
    if first is None:
        raise TraceError("empty file: no records", source=str(path))
    if "record" in first:
        return TraceFormat.NATIVE
    if looks_like_verl(first):
        return TraceFormat.VERL
    raise TraceError(
        'unknown format: the first record has neither "record" (a dynaresize trace) nor '
        '"step" and "data" (verl\'s file logger)',
        source=str(path),
        line=1,
    )


def _first_json_object(path: Path) -> dict | None:
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise TraceError("malformed JSON", source=str(path), line=line_no) from None
            if not isinstance(obj, dict):
                raise TraceError("expected a JSON object", source=str(path), line=line_no)
            return obj
    return None


def import_trace(
    path: str | os.PathLike,
    *,
    format: TraceFormat | str = "auto",
    mapping: CsvMapping | str | None = None,
    options: ImportOptions | None = None,
    lenient: bool = False,
    facts_source: str | None = None,
    samples_as_lengths: bool = False,
) -> Trace:
    """Read any supported trace or log into a `Trace`; `trace.meta.notes` lists what was
    inferred and `trace.skipped` what lenient reading dropped. `facts_source` names where the GPU
    count in `options` came from (default: the sidecar, by its path), for an error when the log
    contradicts it: the user must know which input to correct. `samples_as_lengths` reads a native
    trace's samples into their lengths alone (`read_trace`)."""
    path = Path(path)
    kind = detect_format(path) if format == "auto" else TraceFormat(format)
    if kind is TraceFormat.NATIVE:
        return read_trace(path, lenient=lenient, samples_as_lengths=samples_as_lengths)
    from_sidecar = options is None and sidecar_path(path).is_file()
    options = options if options is not None else sidecar_options(path)
    if kind is TraceFormat.VERL:
        if facts_source is None:
            facts_source = f"the sidecar {sidecar_path(path)}" if from_sidecar else "the run facts"
        trace = import_verl(path, options=options, lenient=lenient, facts_source=facts_source)
    else:
        trace = import_csv(path, _pick_mapping(path, mapping), options=options, lenient=lenient)
    if from_sidecar:
        note = f"run facts (GPU split, batch size, model) read from {sidecar_path(path).name}"
        trace.meta = trace.meta.model_copy(update={"notes": [note, *trace.meta.notes]})
    return trace


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + ".import.json")


def sidecar_options(path: Path) -> ImportOptions | None:
    """ImportOptions from `<log>.import.json` beside the log, if there is one."""
    sidecar = sidecar_path(path)
    if not sidecar.is_file():
        return None
    try:
        raw = json.loads(sidecar.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise TraceError(f"malformed JSON: {err}", source=str(sidecar)) from None
    try:
        return ImportOptions.model_validate(raw)
    except ValidationError as err:
        raise first_validation_problem(err, source=str(sidecar)) from None


def _pick_mapping(path: Path, mapping: CsvMapping | str | None) -> CsvMapping:
    if isinstance(mapping, CsvMapping):
        return mapping
    if isinstance(mapping, str):
        if mapping not in SHIPPED_MAPPINGS:
            raise TraceError(
                f"unknown mapping {mapping!r}; shipped: {sorted(SHIPPED_MAPPINGS)}",
                source=str(path),
            )
        return SHIPPED_MAPPINGS[mapping]
    header = list(read_table(path).columns)
    fits = [
        m
        for m in SHIPPED_MAPPINGS.values()
        if resolve_column(header, m.train_s) is not None
        and resolve_column(header, m.rollout_s or m.wait_s or "") is not None
    ]
    if len(fits) != 1:
        found = "several shipped mappings fit" if fits else "no shipped mapping fits the header"
        raise TraceError(
            f"{found}; give a mapping (one of {sorted(SHIPPED_MAPPINGS)} or a CsvMapping)",
            source=str(path),
        )
    return fits[0]
