"""What every importer shares: the user's facts about the run, reading numbers out of a foreign
record with errors that name the line and key, and turning per-step stage times into schema rows.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from ..errors import TraceError
from ..jsonl_io import finite_json
from ..schema import ExtraMetricRecord, PipelineMode, RunMeta, StepRecord
from ..validation import SkippedRow, empty_frame, validate_frame

_LARGEST_FLOAT = sys.float_info.max

GPU_COUNT_ASSUMED = "GPU count not in the log: assumed"
"""The start of the note an importer writes when it had to assume the GPU count."""


class ImportOptions(BaseModel):
    """Facts about a run that foreign logs do not carry; each one left out is inferred or assumed,
    and the trace's notes say which."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pipeline_mode: PipelineMode | None = Field(
        default=None, description="Override the detected pipeline mode."
    )
    num_gpus: int | None = Field(default=None, gt=0, description="GPUs the run used in total.")
    train_gpus: int | None = Field(
        default=None, gt=0, description="GPUs in the Training role (disaggregated runs)."
    )
    rollout_gpus: int | None = Field(
        default=None, gt=0, description="GPUs in the Rollout role (disaggregated runs)."
    )
    num_samples_per_step: int | None = Field(
        default=None, gt=0, description="Responses per step (prompts x samples per prompt)."
    )
    model_name: str | None = Field(default=None, description="Policy model, e.g. 'Qwen3-8B'.")
    model_params_b: float | None = Field(default=None, gt=0, description="Model size (B params).")
    cluster: str | None = Field(default=None, description="Free text, e.g. '1 node, 8x H20'.")


@dataclass
class LineProblems:
    """Collects problems of one foreign record; strict mode raises at the first."""

    source: str
    lenient: bool
    unit: str = "line"
    skipped: list[SkippedRow] = field(default_factory=list)

    def fail(self, position: int, key: str | None, reason: str) -> None:
        if not self.lenient:
            raise TraceError(reason, source=self.source, field=key, **{self.unit: position})
        self.skipped.append(SkippedRow("steps", f"{self.unit} {position}", key, reason))


class BadValue(Exception):
    """Internal: one value of a foreign record is unusable (caught per record)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key
        self.reason = reason


def number(record: dict, key: str, *, required: bool) -> float | None:
    """A finite, non-negative number from a foreign record; BadValue names the key otherwise."""
    value = record.get(key)
    if type(value) is float and 0.0 <= value <= _LARGEST_FLOAT:
        return value  # the common case first: a long log has millions of these
    if key not in record or record[key] is None:
        if required:
            raise BadValue(key, "missing (required)")
        return None
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadValue(key, f"expected a number, got {type(value).__name__} {value!r:.40}")
    try:
        as_float = float(value)
    except OverflowError:
        raise BadValue(key, f"{str(value)[:12]}... is too large for any measurement") from None
    return finite_non_negative(as_float, key)


def finite_non_negative(value: float, key: str, *, written: str | None = None) -> float:
    """`value` if it is a finite number >= 0; BadValue names the key (and echoes `written`, the
    value as the log spelled it, for an infinity) otherwise."""
    if math.isnan(value):
        raise BadValue(key, "is NaN")
    if math.isinf(value):
        raise BadValue(key, f"must be finite, got {value if written is None else written}")
    if value < 0:
        raise BadValue(key, f"must be >= 0, got {value}")
    return value


def required_number(record: dict, key: str) -> float:
    """Like `number`, for a key the record must have."""
    value = number(record, key, required=True)
    assert value is not None  # number() raised BadValue otherwise
    return value


def split_gpus(
    options: ImportOptions, inferred_total: int | None, *, colocated: bool, notes: list[str]
) -> tuple[int, int, int]:
    """(total, train, rollout) GPUs from what the user said and what the log implies."""
    total = options.num_gpus
    if colocated and total is None and options.train_gpus and options.rollout_gpus:
        # A colocated run uses all its GPUs in both roles; a split given for it is the
        # disaggregated one to compare it with, and its sum is the run's GPU count.
        total = options.train_gpus + options.rollout_gpus
    if options.train_gpus and options.rollout_gpus and not colocated:
        given = options.train_gpus + options.rollout_gpus
        if total is not None and total != given:
            raise TraceError(f"num_gpus {total} differs from train_gpus + rollout_gpus = {given}")
        return given, options.train_gpus, options.rollout_gpus
    if total is None and inferred_total is not None:
        total = inferred_total
        notes.append(
            f"total GPU count {total} inferred from perf/total_num_tokens / "
            "(perf/throughput x perf/time_per_step)"
        )
    if total is None:
        total = 8
        notes.append(f"{GPU_COUNT_ASSUMED} 8 (give num_gpus to set it)")
    if colocated:
        return total, total, total
    if options.train_gpus:
        train = options.train_gpus
    elif options.rollout_gpus:
        train = total - options.rollout_gpus
    else:
        train = total - total // 2
        notes.append(
            f"Training/Rollout split not in the log: assumed {train}:{total - train} "
            "(give train_gpus and rollout_gpus to set it)"
        )
    rollout = total - train
    if train <= 0 or rollout <= 0:
        raise TraceError(f"cannot split {total} GPUs into {train} training and {rollout} rollout")
    return total, train, rollout


def imported_meta(
    options: ImportOptions,
    *,
    source: str,
    importer: str,
    path: str,
    mode: PipelineMode,
    gpus: tuple[int, int, int],
    notes: list[str],
) -> RunMeta:
    """The run metadata of an imported log: what the importer found plus the user's facts.
    `gpus` is `split_gpus`'s (total, train, rollout)."""
    total, train, rollout = gpus
    return RunMeta(
        source=source,
        source_path=path,
        importer=importer,
        pipeline_mode=mode,
        num_gpus=total,
        start_train_gpus=train,
        start_rollout_gpus=rollout,
        model_name=options.model_name,
        model_params_b=options.model_params_b,
        cluster=options.cluster,
        notes=notes,
    )


def device_roles(train_gpus: int, rollout_gpus: int) -> list[str]:
    return ["train"] * train_gpus + ["rollout"] * rollout_gpus


def steps_frame(
    columns: dict[str, np.ndarray | list],
    *,
    source: str,
    gap_after_s: np.ndarray | None = None,
    check: bool = True,
) -> pd.DataFrame:
    """Schema-checked steps table from importer-derived columns (a failure here is a bug in the
    derivation or a log whose numbers contradict each other; either way it names the step).

    Steps follow each other on the clock, each separated from the next by `gap_after_s` (work a
    log timed outside its step timer, such as validation), or by nothing. `check=False` leaves
    the schema check to the caller (which can then name the log's own lines and keys)."""
    n = len(columns["step"])
    if n == 0:
        return empty_frame(StepRecord)
    step_s = np.asarray(columns["step_s"], float)
    gaps = np.zeros(n) if gap_after_s is None else np.asarray(gap_after_s, float)
    start = np.concatenate([[0.0], np.cumsum(step_s + gaps)[:-1]])
    frame = pd.DataFrame(
        {
            "step": np.asarray(columns["step"], np.int64),
            "start_s": start,
            "end_s": start + step_s,
            **{k: v for k, v in columns.items() if k != "step"},
        }
    )
    if not check:
        return frame
    return validate_frame(frame, StepRecord, table="steps", source=source)


def extras_frame(rows: list[tuple[int, str, object]]) -> pd.DataFrame:
    """Unknown metrics, kept: (trace step, original key, value) -> the extras table."""
    if not rows:
        return empty_frame(ExtraMetricRecord)
    steps, keys, values = zip(*rows, strict=True)
    encoded = [
        repr(v) if type(v) is float and -_LARGEST_FLOAT <= v <= _LARGEST_FLOAT else _json_value(v)
        for v in values
    ]
    return pd.DataFrame(
        {
            "schema_version": np.ones(len(rows), np.int64),
            "step": np.asarray(steps, np.int64),
            "key": list(keys),
            "value_json": encoded,
        }
    )


def _json_value(value: object) -> str:
    """One extras value as strict JSON; plain finite numbers take a short path (a long log has
    millions of them)."""
    kind = type(value)
    if kind is float and math.isfinite(value):  # type: ignore[arg-type]
        return repr(value)
    if kind is int:
        return str(value)
    return json.dumps(finite_json(value), allow_nan=False, default=str)


def has_non_finite(value: object) -> bool:
    """Whether `value` holds a NaN or an infinity anywhere."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list):
        return any(has_non_finite(v) for v in value)
    if isinstance(value, dict):
        return any(has_non_finite(v) for v in value.values())
    return False


__all__ = [
    "BadValue",
    "ExtraMetricRecord",
    "ImportOptions",
    "LineProblems",
    "device_roles",
    "extras_frame",
    "finite_json",
    "finite_non_negative",
    "has_non_finite",
    "imported_meta",
    "number",
    "required_number",
    "split_gpus",
    "steps_frame",
]
