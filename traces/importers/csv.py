"""Generic CSV importer: a metrics table with one row per step, read through a column mapping.

It reads the CSV a framework wrote and the table an experiment tracker exports (W&B's "Export
CSV" names columns `<run> - <metric>` and leaves cells empty where a metric was not logged).
A `CsvMapping` says which column holds which stage time; shipped mappings cover slime, OpenRLHF
and AReaL (traces/importers/mappings.py). What the table lacks is derived, and the trace's notes
say how. Columns the mapping does not use are kept in the extras table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from ..errors import TraceError
from ..io import Trace
from ..schema import PipelineMode
from .common import (
    BadValue,
    ImportOptions,
    LineProblems,
    extras_frame,
    finite_non_negative,
    imported_meta,
    split_gpus,
    steps_frame,
)
from .csv_derived import derive_columns

STEP_COLUMN_CANDIDATES = ("step", "Step", "_step", "global_step", "train/global_step")
"""Where the step number is looked for when the mapping does not name a column."""


class CsvMapping(BaseModel):
    """Which CSV column holds which quantity; unnamed quantities are derived or assumed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="custom", description="Mapping name, recorded as 'csv:<name>'.")
    pipeline_mode: PipelineMode = Field(description="How the run's stages overlap.")
    step: str | None = Field(default=None, description="Step-number column (auto if None).")
    step_base: int = Field(default=0, ge=0, description="Step number of the log's first step.")
    time_scale_s: float = Field(
        default=1.0, gt=0, description="Seconds per unit of the time columns (0.001 for ms)."
    )
    rollout_s: str | None = Field(default=None, description="Rollout (generation) duration.")
    train_s: str = Field(description="Training-stage duration.")
    sync_s: str | None = Field(default=None, description="Weight-sync duration.")
    wait_s: str | None = Field(
        default=None, description="Time the trainer waited for rollout data (async runs)."
    )
    step_s: str | None = Field(default=None, description="Whole-step duration.")
    tokens: str | None = Field(default=None, description="Prompt plus response tokens per step.")
    num_samples: str | None = Field(default=None, description="Responses per step.")
    prompt_len_mean: str | None = Field(default=None, description="Mean prompt length.")
    response_len_mean: str | None = Field(default=None, description="Mean response length.")
    response_len_max: str | None = Field(default=None, description="Longest response.")
    response_len_p50: str | None = Field(default=None, description="Median response length.")
    response_len_p99: str | None = Field(default=None, description="p99 response length.")
    meaning: dict[str, str] = Field(
        default_factory=dict, description="What each mapped column measures, for the notes."
    )

    def columns(self) -> dict[str, str]:
        """Quantity -> column name, for every quantity the mapping names."""
        return {n: getattr(self, n) for n in _QUANTITIES if getattr(self, n) is not None}


_QUANTITIES = (
    "rollout_s",
    "train_s",
    "sync_s",
    "wait_s",
    "step_s",
    "tokens",
    "num_samples",
    "prompt_len_mean",
    "response_len_mean",
    "response_len_max",
    "response_len_p50",
    "response_len_p99",
)
_TIME_QUANTITIES = {"rollout_s", "train_s", "sync_s", "wait_s", "step_s"}


def read_table(path: Path) -> pd.DataFrame:
    """Every cell as text (nothing is evaluated); TraceError for an empty or malformed file."""
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[])
    except pd.errors.EmptyDataError:
        raise TraceError("empty file: no header and no rows", source=str(path)) from None
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        raise TraceError(f"malformed CSV: {err}", source=str(path)) from None
    if df.empty:
        raise TraceError("no data rows under the header", source=str(path))
    return df


def resolve_column(header: list[str], name: str) -> str | None:
    """`name` itself, or the one tracker-export column `<run> - name` (not a __MIN/__MAX)."""
    if name in header:
        return name
    hits = [c for c in header if c.endswith(f" - {name}")]
    return hits[0] if len(hits) == 1 else None


def import_csv(
    path: str | Path,
    mapping: CsvMapping,
    *,
    options: ImportOptions | None = None,
    lenient: bool = False,
) -> Trace:
    path = Path(path)
    options = options or ImportOptions()
    if options.pipeline_mode is not None:
        mapping = mapping.model_copy(update={"pipeline_mode": options.pipeline_mode})
    df = read_table(path)
    header = list(df.columns)
    notes = [f"imported from CSV with the '{mapping.name}' mapping ({mapping.pipeline_mode.value})"]
    notes += [f"{col}: {what}" for col, what in mapping.meaning.items()]
    step_col = _step_column(header, mapping, source=str(path))
    resolved = _resolve_all(header, mapping, notes, source=str(path))
    problems = LineProblems(str(path), lenient)
    values, rows_used, num_blank = _parse(df, step_col, resolved, mapping, problems)
    if num_blank:
        notes.append(f"{num_blank} rows with no stage time (sparse tracker export) were left out")
    if not rows_used:
        raise TraceError("no rows with stage times", source=str(path))
    total, train, rollout = split_gpus(
        options, None, colocated=mapping.pipeline_mode is PipelineMode.COLOCATED, notes=notes
    )
    columns = derive_columns(
        values,
        time_scale_s=mapping.time_scale_s,
        mode=mapping.pipeline_mode,
        train_gpus=train,
        rollout_gpus=rollout,
        options=options,
        notes=notes,
    )
    steps = steps_frame(columns, source=str(path))
    used = {step_col, *resolved.values()}
    extras = extras_frame(
        [
            (int(step), col, _cell_value(df.at[idx, col]))
            for idx, step in zip(rows_used, columns["step"], strict=True)
            for col in header
            if col not in used and df.at[idx, col].strip() != ""
        ]
    )
    meta = imported_meta(
        options,
        source=mapping.name,
        importer=f"csv:{mapping.name}",
        path=str(path),
        mode=mapping.pipeline_mode,
        gpus=(total, train, rollout),
        notes=notes,
    )
    trace = Trace(meta=meta, steps=steps, extras=extras, skipped=problems.skipped)
    return trace.validated(source=str(path))


def _step_column(header: list[str], mapping: CsvMapping, *, source: str) -> str:
    candidates = [mapping.step] if mapping.step else list(STEP_COLUMN_CANDIDATES)
    for name in candidates:
        col = resolve_column(header, name)
        if col is not None:
            return col
    raise TraceError(
        f"no step column (looked for {candidates}); name it in the mapping's 'step'",
        source=source,
        field=candidates[0],
    )


def _resolve_all(
    header: list[str], mapping: CsvMapping, notes: list[str], *, source: str
) -> dict[str, str]:
    resolved = {}
    for quantity, name in mapping.columns().items():
        col = resolve_column(header, name)
        if col is None:
            if quantity == "train_s" or (quantity == "rollout_s" and mapping.wait_s is None):
                raise TraceError(
                    f"column for {quantity} not found (header has {len(header)} columns)",
                    source=source,
                    field=name,
                )
            notes.append(f"column '{name}' ({quantity}) is not in the file: derived or assumed")
            continue
        resolved[quantity] = col
    if "rollout_s" not in resolved and "wait_s" not in resolved:
        raise TraceError("the mapping names no rollout or wait column", source=source)
    return resolved


def _parse(
    df: pd.DataFrame,
    step_col: str,
    resolved: dict[str, str],
    mapping: CsvMapping,
    problems: LineProblems,
) -> tuple[dict[str, list[float]], list[int], int]:
    """Numbers of every used row; rows with no stage time at all are blank, not errors."""
    values: dict[str, list[float]] = {q: [] for q in [*resolved, "step"]}
    rows_used: list[int] = []
    num_blank = 0
    last_step: int | None = None
    time_cols = [resolved[q] for q in resolved if q in _TIME_QUANTITIES]
    for idx in range(len(df)):
        line = idx + 2  # line 1 is the header
        if all(df.at[idx, c].strip() == "" for c in time_cols):
            num_blank += 1
            continue
        try:
            row = {q: _cell_number(df.at[idx, col], col) for q, col in resolved.items()}
            step_value = _cell_number(df.at[idx, step_col], step_col)
            if step_value is None:
                raise BadValue(step_col, "missing (required)")
            if not float(step_value).is_integer():
                raise BadValue(step_col, f"expected an integer step, got {step_value}")
            step = int(step_value) - mapping.step_base
            if step < 0:
                raise BadValue(step_col, f"step {int(step_value)} is before step_base")
            if last_step is not None and step <= last_step:
                raise BadValue(step_col, f"steps out of order: {step} after {last_step}")
            for q in ("train_s",) if "rollout_s" not in resolved else ("train_s", "rollout_s"):
                if row.get(q) is None:
                    raise BadValue(resolved[q], "missing (required)")
        except BadValue as bad:
            problems.fail(line, bad.key, bad.reason)
            continue
        last_step = step
        rows_used.append(idx)
        values["step"].append(step)
        for q in resolved:
            cell = row[q]
            values[q].append(np.nan if cell is None else cell)
    return values, rows_used, num_blank


def _cell_number(text: str, column: str) -> float | None:
    text = text.strip()
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise BadValue(column, f"expected a number, got {text[:40]!r}") from None
    return finite_non_negative(value, column, written=text)


def _cell_value(text: str) -> object:
    try:
        return float(text)
    except ValueError:
        return text
