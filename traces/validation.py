"""Column-wise validation of trace tables against the schema's pydantic records.

Checking a million-row table one pydantic model at a time is slow, so each record type is turned
once into column specs (kind, bounds, choices, nullability: `column_specs`) and a whole column
is checked with numpy. The outcome is identical to validating every row: the first bad row
(lowest position) becomes a TraceError naming it and the field; in lenient mode every bad row is
dropped and reported instead.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pydantic import BaseModel

from .column_problems import Problems, check_roles, describe
from .column_specs import (
    MAX_TRACE_COUNT,
    MAX_TRACE_SECONDS,
    ColumnKind,
    ColumnSpec,
    column_dtype,
    column_specs,
    empty_frame,
    upper_bound,
)
from .errors import TraceError
from .schema import SCHEMA_VERSION, StepRecord
from .step_consistency import check_step_numbering, drop_orphan_samples

__all__ = [
    "MAX_TRACE_COUNT",
    "MAX_TRACE_SECONDS",
    "ColumnKind",
    "ColumnSpec",
    "Problems",
    "SkippedRow",
    "check_step_numbering",
    "column_specs",
    "drop_orphan_samples",
    "empty_frame",
    "summarize_skipped",
    "validate_frame",
    "validate_steps_frame",
]


@dataclass(frozen=True)
class SkippedRow:
    """A row that lenient reading dropped, and why."""

    table: str
    where: str
    field: str | None
    reason: str


def _is_number(v: object) -> bool:
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(
        v, bool | np.bool_
    )


def _is_null(v: object) -> bool:
    return v is None or (isinstance(v, float | np.floating) and math.isnan(v)) or v is pd.NA


def _as_float(value: object) -> float:
    """A JSON number as a float; an integer too large for one (10**400) reads as infinity,
    which the finiteness check then reports instead of an OverflowError."""
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:
        return math.inf if value > 0 else -math.inf  # type: ignore[operator]


_NONE = np.full(1, None, dtype=object)
"""None as an array, to compare a column of objects with in one pass."""


def _check_column(
    col: pd.Series, spec: ColumnSpec, problems: Problems, *, keep_text: bool = False
) -> pd.Series | None:
    """Flag bad values of one column; return it converted to the spec's dtype (bad rows masked).
    With `keep_text`, a pandas text column is checked and returned as it is (see
    `validate_frame`)."""
    null = col.isna().to_numpy()
    if keep_text and spec.kind is ColumnKind.STR and isinstance(col.dtype, pd.StringDtype):
        return _check_typed_text(col, spec, null, problems)
    values = col.to_numpy(dtype=object) if col.dtype == object else None
    if spec.kind in (ColumnKind.INT, ColumnKind.FLOAT):
        return _check_numeric(col, values, null, spec, problems)
    if spec.kind is ColumnKind.BOOL:
        if pd.api.types.is_bool_dtype(col.dtype) and not null.any():
            return col.astype(bool)
        vals = col.to_numpy(dtype=object)
        bad = np.array([not isinstance(v, bool | np.bool_) for v in vals], dtype=bool)
        problems.add(bad, spec.name, lambda i: f"expected true/false, got {describe(vals[i])}")
        return pd.Series(np.where(bad, False, vals).astype(bool), index=col.index)
    if spec.kind is ColumnKind.STR:
        vals = col.to_numpy(dtype=object)
        # a pandas text column holds text or nulls only: no value to look at one by one
        typed = isinstance(col.dtype, pd.StringDtype)
        if not typed and null.all() and np.equal(vals, _NONE).all():
            typed = True  # an optional column nobody filled: nulls only, by the same test
        is_str = ~null if typed else np.array([isinstance(v, str) for v in vals], dtype=bool)
        if spec.nullable:
            nulls = null if typed else np.array([_is_null(v) for v in vals], dtype=bool)
            problems.add(~is_str & ~nulls, spec.name, lambda i: _bad_text(vals[i]))
            out = vals.copy()
            out[~is_str] = None
        else:
            problems.add(~is_str, spec.name, lambda i: _bad_text(vals[i], missing=True))
            out = vals
        if spec.choices is not None:
            choices = spec.choices
            if typed:
                outside = is_str & ~col.isin(list(choices)).to_numpy(dtype=bool)
            else:
                outside = np.array(
                    [isinstance(v, str) and v not in choices for v in vals], dtype=bool
                )
            problems.add(
                outside,
                spec.name,
                lambda i: (
                    f"unknown value {vals[i]!r}; expected one of {sorted(spec.choices or ())}"
                ),
            )
        return pd.Series(out, index=col.index, dtype=object)
    return check_roles(col, spec.name, problems)


def _check_typed_text(
    col: pd.Series, spec: ColumnSpec, null: np.ndarray, problems: Problems
) -> pd.Series:
    """A pandas text column holds text or nulls only: only its nulls and its values outside the
    choices can be wrong, and no value is turned into a Python object unless it is."""
    if not spec.nullable:
        problems.add(null, spec.name, lambda i: _bad_text(None, missing=True))
    if spec.choices is not None:
        outside = ~null & ~col.isin(list(spec.choices)).to_numpy(dtype=bool)
        problems.add(
            outside,
            spec.name,
            lambda i: (
                f"unknown value {col.iloc[i]!r}; expected one of {sorted(spec.choices or ())}"
            ),
        )
    return col


def _bad_text(value: object, *, missing: bool = False) -> str:
    if missing and _is_null(value):
        return "missing (required text)"
    return f"expected text, got {describe(value)}"


def _check_numeric(
    col: pd.Series,
    values: np.ndarray | None,
    null: np.ndarray,
    spec: ColumnSpec,
    problems: Problems,
) -> pd.Series:
    want_int = spec.kind is ColumnKind.INT
    if values is not None and null.all():  # an optional column nobody filled
        nums = np.full(len(col), np.nan)
    elif values is not None:  # object column: every element must be a number (or null)
        ok = np.array([_is_number(v) or _is_null(v) for v in values], dtype=bool)
        label = "an integer" if want_int else "a number"
        problems.add(~ok, spec.name, lambda i: f"expected {label}, got {describe(values[i])}")
        nums = np.array(
            [
                _as_float(v) if ok[k] and v is not None and v is not pd.NA else np.nan
                for k, v in enumerate(values)
            ],
            dtype=np.float64,
        )
        null = np.array([v is None or v is pd.NA for v in values], dtype=bool) | ~ok
    elif pd.api.types.is_bool_dtype(col.dtype):
        problems.add(np.ones(len(col), bool), spec.name, lambda i: "expected a number, got bool")
        return pd.Series(np.zeros(len(col)), index=col.index)
    elif pd.api.types.is_numeric_dtype(col.dtype):
        nums = col.to_numpy(dtype=np.float64, na_value=np.nan)
        null = np.zeros(len(col), bool)  # a numeric column's nulls read as NaN below
    else:
        problems.add(
            np.ones(len(col), bool), spec.name, lambda i: f"expected numbers, column is {col.dtype}"
        )
        return pd.Series(np.zeros(len(col)), index=col.index)
    raw_nan = np.isnan(nums) & ~null
    if not spec.nullable:
        problems.add(null, spec.name, lambda i: "missing (required)")
        problems.add(raw_nan, spec.name, lambda i: "is NaN or missing")
    inf = np.isinf(nums)
    problems.add(inf, spec.name, lambda i: f"must be finite, got {nums[i]}")
    finite = np.isfinite(nums)
    if want_int:
        frac = finite & (np.floor(nums) != nums)
        problems.add(frac, spec.name, lambda i: f"expected an integer, got {nums[i]}")
    if spec.ge is not None:
        below = finite & (nums < spec.ge)
        problems.add(below, spec.name, lambda i: f"must be >= {spec.ge}, got {nums[i]}")
    limit, limit_text = upper_bound(spec.name)
    above = finite & (nums > limit)
    problems.add(above, spec.name, lambda i: f"must be at most {limit_text}, got {nums[i]:.6g}")
    if not want_int:
        return pd.Series(np.where(finite, nums, np.nan), index=col.index, dtype=np.float64)
    if pd.api.types.is_integer_dtype(col.dtype) and not spec.nullable:
        return col.astype(np.int64)
    # Values past the bound are flagged above; only the rest are cast (no overflow on a cast).
    castable = finite & (np.abs(np.where(finite, nums, 0.0)) <= limit)
    filled = np.where(castable, nums, 0).astype(np.int64)
    if spec.nullable:
        return pd.Series(pd.array(filled, dtype="Int64"), index=col.index).mask(~castable)
    return pd.Series(filled, index=col.index)


def _cross_checks(df: pd.DataFrame, table: str, problems: Problems) -> None:
    cols = set(df.columns)
    if {"start_s", "end_s"} <= cols:
        start, end = df["start_s"].to_numpy(float), df["end_s"].to_numpy(float)
        problems.add(end < start, "end_s", lambda i: f"end_s {end[i]} is before start_s {start[i]}")
    if "schema_version" in cols:
        ver = df["schema_version"].to_numpy()
        problems.add(
            ver != SCHEMA_VERSION,
            "schema_version",
            lambda i: f"unknown schema version {ver[i]} (this reader knows {SCHEMA_VERSION})",
        )
    if table == "steps":
        lens = df["device_roles"].map(len).to_numpy()
        total = df["train_gpus"].to_numpy() + df["rollout_gpus"].to_numpy()
        problems.add(
            lens != total,
            "device_roles",
            lambda i: f"has {lens[i]} entries but train_gpus + rollout_gpus = {total[i]}",
        )


def validate_frame(
    df: pd.DataFrame,
    model: type[BaseModel],
    *,
    table: str,
    source: str | None = None,
    unit: str = "row",
    positions: np.ndarray | None = None,
    lenient: bool = False,
    skipped: list[SkippedRow] | None = None,
    keep_text: bool = False,
) -> pd.DataFrame:
    """Check a table against its record type and return it in canonical columns and dtypes.

    With `keep_text`, text columns already held as pandas text (the twin's, Arrow-backed) stay
    so rather than becoming columns of Python strings: what a writer of Arrow wants, where the
    conversion there and back cost more than the checks.

    `positions` maps each frame row to what the user sees (JSONL line numbers; default: the row
    index 0..n-1 of the file). Strict mode raises TraceError at the first bad row; lenient mode
    drops bad rows and appends one SkippedRow each to `skipped`.
    """
    specs = column_specs(model)
    known = {s.name for s in specs}
    unknown = [c for c in df.columns if c not in known]
    if unknown:
        raise TraceError(
            f"unknown column(s) {unknown} for table '{table}'", source=source, field=unknown[0]
        )
    missing = [s.name for s in specs if s.required and s.name not in df.columns]
    if missing and len(df):
        raise TraceError(
            f"required column missing from table '{table}'", source=source, field=missing[0]
        )
    if len(df) == 0:
        return empty_frame(model)
    df = df.reset_index(drop=True)
    problems = Problems()
    out = {}
    for spec in specs:
        if spec.name not in df.columns:
            out[spec.name] = pd.Series([spec.default] * len(df), dtype=column_dtype(spec))
            continue
        out[spec.name] = _check_column(df[spec.name], spec, problems, keep_text=keep_text)
    clean = pd.DataFrame(out)
    _cross_checks(clean, table, problems)
    if table == "steps":
        _check_order(clean, problems, skip=set(problems.found) if lenient else set())
    return _settle(
        clean,
        problems,
        table=table,
        source=source,
        unit=unit,
        positions=positions,
        lenient=lenient,
        skipped=skipped,
    )


def _check_order(df: pd.DataFrame, problems: Problems, *, skip: set[int]) -> None:
    """Steps must strictly increase; rows already found bad do not count (lenient mode)."""
    steps = df["step"].to_numpy(np.int64)
    keep = np.ones(len(steps), bool)
    if skip:
        keep[list(skip)] = False
    kept_steps = np.where(keep, steps, np.iinfo(np.int64).min)
    prev_max = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], kept_steps[:-1]]))
    out_of_order = keep & (steps <= prev_max)
    problems.add(
        out_of_order,
        "step",
        lambda i: f"steps out of order: step {steps[i]} after step {prev_max[i]}",
    )


def _settle(
    df: pd.DataFrame,
    problems: Problems,
    *,
    table: str,
    source: str | None,
    unit: str,
    positions: np.ndarray | None,
    lenient: bool,
    skipped: list[SkippedRow] | None,
) -> pd.DataFrame:
    if not problems.found:
        return df
    where = positions if positions is not None else np.arange(len(df))
    if not lenient:
        first = min(problems.found)
        field_name, reason = problems.found[first]
        raise TraceError(reason, source=source, field=field_name, **{unit: int(where[first])})
    if skipped is not None:
        for pos in sorted(problems.found):
            field_name, reason = problems.found[pos]
            skipped.append(SkippedRow(table, f"{unit} {int(where[pos])}", field_name, reason))
    bad = np.zeros(len(df), bool)
    bad[list(problems.found)] = True
    return df.loc[~bad].reset_index(drop=True)


def validate_steps_frame(df: pd.DataFrame, *, source: str | None = None) -> pd.DataFrame:
    """Fast check of a steps table (e.g. from the twin), raising TraceError at the first bad row."""
    return validate_frame(df, StepRecord, table="steps", source=source)


def summarize_skipped(skipped: list[SkippedRow]) -> str:
    """'N rows skipped: k x <field: reason>, ...' for the CLI and notebooks."""
    if not skipped:
        return "no rows skipped"
    kinds = Counter(f"{s.table}.{s.field}: {_reason_kind(s.reason)}" for s in skipped)
    parts = ", ".join(f"{n} x {k}" for k, n in kinds.most_common())
    return f"{len(skipped)} rows skipped ({parts})"


def _reason_kind(reason: str) -> str:
    """The reason without the offending value, so similar problems group together."""
    return reason.split(",")[0].split(" got ")[0].strip()
