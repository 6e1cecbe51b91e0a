"""The one error type for bad trace input.

A user who hands the project a broken log needs to know where to look: the message always names
the file and, when known, the line (JSONL, CSV) or row (Parquet) and the field. It subclasses
ValueError so the CLI's `user_errors` guard turns it into one line and exit code 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class TraceError(ValueError):
    """A trace file that cannot be read as the schema says: names file, line or row, and field."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        row: int | None = None,
        field: str | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.row = row
        self.field = field
        self.reason = message
        super().__init__(_compose(message, source=source, line=line, row=row, field=field))


def _compose(
    message: str, *, source: str | None, line: int | None, row: int | None, field: str | None
) -> str:
    where = []
    if source is not None:
        where.append(str(source))
    if line is not None:
        where.append(f"line {line}")
    if row is not None:
        where.append(f"row {row}")
    if field is not None:
        where.append(f"field '{field}'")
    return f"{', '.join(where)}: {message}" if where else message


def first_validation_problem(
    err: ValidationError, *, source: str, line: int | None = None
) -> TraceError:
    """A TraceError for the first problem pydantic found, naming its dotted field path."""
    first = err.errors()[0]
    loc = ".".join(str(x) for x in first.get("loc", ())) or None
    return TraceError(first.get("msg", "invalid"), source=source, line=line, field=loc)
