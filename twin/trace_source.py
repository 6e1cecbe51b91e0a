"""Opening a trace given on the command line, whatever its format.

A user's `--trace` may be one of the project's own traces (Parquet directory, JSONL) or a foreign
log that an importer understands (verl's file logger, a CSV export). The importers' `import_trace`
detects which; this module is the one place the analysis commands go through, so they all accept
the same inputs and report the same notes about what was inferred.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..traces.io import Trace, read_trace


def open_trace(path: str | os.PathLike, *, lenient: bool = False) -> Trace:
    """The trace at `path`, imported from a foreign format when needed (raises TraceError)."""
    location = Path(path)
    if not location.exists():
        raise FileNotFoundError(2, "no such trace", str(location))
    try:
        from ..traces.importers import import_trace
    except ImportError:  # a build without importers still reads the project's own formats
        return read_trace(location, lenient=lenient)
    try:
        return import_trace(location, lenient=lenient)
    except TypeError:  # an import_trace without the lenient option
        return import_trace(location)


def trace_notes(trace: Trace) -> list[str]:
    """What the producer or importer inferred, and what rows lenient reading skipped."""
    notes = list(trace.meta.notes)
    if trace.skipped:
        notes.append(trace.skipped_summary())
    return notes
