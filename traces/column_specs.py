"""What each column of a trace table must hold, read once off the schema's pydantic records.

Validating a table column by column needs, per field, its kind, bounds, choices and whether it
may be null; pydantic keeps these in annotations and field metadata, which are slow to consult
per row. `column_specs` reads them once per record type (cached), and readers that build empty
tables take their dtypes from the same specs, so a table's columns and its checks never disagree.
"""

from __future__ import annotations

import enum
import types
import typing
from dataclasses import dataclass
from functools import cache

import pandas as pd
from pydantic import BaseModel

from .phases import Role


class ColumnKind(str, enum.Enum):
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    STR = "str"
    ROLES = "roles"


MAX_TRACE_SECONDS = 1e12
"""Largest time a trace may hold (s, about 31,700 years): a clock or a duration beyond it is a
mistake, and bounding it keeps every sum, fit and ratio computed from a trace finite."""

MAX_TRACE_COUNT = 2**53
"""Largest count (tokens, samples, bytes, ids) a trace may hold: every such integer is exact
as a float."""


def upper_bound(name: str) -> tuple[float, str]:
    """The largest value of a numeric field, and how a message describes it."""
    if name.endswith("_s"):
        return MAX_TRACE_SECONDS, f"{MAX_TRACE_SECONDS:.0e} s (about 31,700 years)"
    return float(MAX_TRACE_COUNT), "2**53"


@dataclass(frozen=True)
class ColumnSpec:
    """What one column of a table must hold, read off a pydantic field."""

    name: str
    kind: ColumnKind
    required: bool
    nullable: bool
    default: object
    ge: float | None
    choices: frozenset[str] | None


def _unwrap_optional(annotation: object) -> tuple[object, bool]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(annotation))
    return annotation, False


@cache
def column_specs(model: type[BaseModel]) -> tuple[ColumnSpec, ...]:
    """The column specs of a record type, in field order."""
    specs = []
    for name, info in model.model_fields.items():
        inner, nullable = _unwrap_optional(info.annotation)
        choices = None
        if inner is bool:
            kind = ColumnKind.BOOL
        elif inner is int:
            kind = ColumnKind.INT
        elif inner is float:
            kind = ColumnKind.FLOAT
        elif inner is str:
            kind = ColumnKind.STR
        elif isinstance(inner, type) and issubclass(inner, enum.Enum):
            kind, choices = ColumnKind.STR, frozenset(m.value for m in inner)
        elif typing.get_origin(inner) is list and typing.get_args(inner) == (Role,):
            kind = ColumnKind.ROLES
        else:  # pragma: no cover - a schema field type this module does not know yet
            raise TypeError(f"no column rule for {model.__name__}.{name}: {info.annotation}")
        ge = next((m.ge for m in info.metadata if getattr(m, "ge", None) is not None), None)
        default = None if info.is_required() else info.get_default(call_default_factory=True)
        specs.append(ColumnSpec(name, kind, info.is_required(), nullable, default, ge, choices))
    return tuple(specs)


def empty_frame(model: type[BaseModel]) -> pd.DataFrame:
    """A frame with the record type's columns and no rows."""
    return pd.DataFrame({s.name: pd.Series([], dtype=column_dtype(s)) for s in column_specs(model)})


def column_dtype(spec: ColumnSpec) -> str:
    if spec.kind is ColumnKind.INT:
        return "Int64" if spec.nullable else "int64"
    if spec.kind is ColumnKind.FLOAT:
        return "float64"
    if spec.kind is ColumnKind.BOOL:
        return "bool"
    return "object"
