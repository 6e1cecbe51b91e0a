"""The record tables of one simulated run, assembled column-wise from the pipeline's records:
steps (with idle GPU-seconds from the busy intervals), resize phases, decisions and samples.

Apart from `simulation.py` so that running a policy and shaping its output read separately.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from dynaresize.traces.schema import SCHEMA_VERSION, DecisionRecord, ResizePhaseRecord, StepRecord
from dynaresize.traces.workload import Workload

from ._lazy import LazyModule
from .pipeline_run import Intervals, PipelineRecords

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = LazyModule("pandas")

STEP_COLUMNS = list(StepRecord.model_fields)
RESIZE_COLUMNS = list(ResizePhaseRecord.model_fields)
DECISION_COLUMNS = list(DecisionRecord.model_fields)


def _busy_between(
    intervals: Intervals | list[tuple[float, float]] | np.ndarray, lo: np.ndarray, hi: np.ndarray
):
    """Busy seconds inside each window [lo, hi) given non-overlapping busy intervals (as the
    pipeline records them, a list of (start, end) pairs, or an array of them)."""
    if len(intervals) == 0:
        return np.zeros_like(lo)
    if isinstance(intervals, Intervals):
        starts, ends = intervals.columns()
    else:
        arr = np.array(intervals, dtype=np.float64)
        starts, ends = arr[:, 0], arr[:, 1]
    if np.any(starts[1:] < starts[:-1]):  # the pipeline appends in time order; sort otherwise
        order = np.lexsort((ends, starts))
        starts, ends = starts[order], ends[order]
    done_before = np.concatenate([[0.0], np.cumsum(ends - starts)])

    def busy_until(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(starts, t, side="right")
        prev = np.maximum(i - 1, 0)
        partial = np.where(i > 0, np.clip(t - starts[prev], 0.0, ends[prev] - starts[prev]), 0.0)
        return done_before[np.maximum(i - 1, 0)] * (i > 0) + partial

    return busy_until(hi) - busy_until(lo)


_LENDING_COLUMNS = ("lent_gpus", "lend_start_s", "lend_end_s", "lend_switch_s")


def _lending_columns(records: PipelineRecords, n: int) -> dict[str, Any]:
    """The step table's lending columns: recorded where the pipeline could lend, else empty."""
    lending = records.lending
    if lending is None:
        empty_ints = pd.arrays.IntegerArray(np.zeros(n, np.int64), np.ones(n, bool))
        return {"lent_gpus": empty_ints, **{c: np.full(n, np.nan) for c in _LENDING_COLUMNS[1:]}}
    return {c: lending[c] for c in _LENDING_COLUMNS}


def _steps_frame(records: PipelineRecords, stats: pd.DataFrame) -> pd.DataFrame:
    steps = records.steps
    lo, hi, step_s = (np.asarray(steps[c], np.float64) for c in ("start_s", "end_s", "step_s"))
    busy_train = _busy_between(records.train_intervals, lo, hi)
    busy_rollout = _busy_between(records.rollout_intervals, lo, hi)
    cols: dict[str, Any] = dict(steps)
    cols["idle_train_gpu_s"] = np.maximum(step_s - busy_train, 0.0) * steps["train_gpus"]
    cols["idle_rollout_gpu_s"] = np.maximum(step_s - busy_rollout, 0.0) * steps["rollout_gpus"]
    cols["resize_id"] = _nullable_ints(list(steps["resize_id"]))
    cols["schema_version"] = np.full(len(lo), SCHEMA_VERSION)
    cols["engine_logprob_abs_diff_mean"] = np.full(len(lo), np.nan)  # no engine
    cols.update(_lending_columns(records, len(lo)))
    index = np.asarray(steps["step"])
    for column in stats.columns:
        cols[column] = stats[column].to_numpy()[index]
    return _columns_frame({name: cols[name] for name in STEP_COLUMNS})


def _nullable_ints(values: list | np.ndarray | Any) -> pd.api.extensions.ExtensionArray:
    """A pandas Int64 column from a list of ints and Nones, without pandas' per-item inference
    (one already built, as the decision log builds its resize ids, as it is)."""
    if isinstance(values, pd.arrays.IntegerArray):
        return values
    count = len(values)
    missing = np.fromiter((v is None for v in values), dtype=bool, count=count)
    data = np.fromiter((0 if v is None else v for v in values), dtype=np.int64, count=count)
    return pd.arrays.IntegerArray(data, missing)


def _frame(
    columns: Mapping[str, list | np.ndarray], names: list[str], ints: tuple[str, ...] = ()
) -> pd.DataFrame:
    rows = len(next(iter(columns.values()))) if columns else 0
    data: dict[str, object] = {}
    for name in names:
        if name == "schema_version":
            data[name] = np.full(rows, SCHEMA_VERSION)
        elif name in ints:
            data[name] = _nullable_ints(columns.get(name, [None] * rows))
        elif name in columns:
            data[name] = columns[name]
        else:  # a field the twin does not record: nulls, as a column of None objects
            data[name] = pd.Series(np.full(rows, None, dtype=object), dtype=object)
    return _columns_frame(data)


def _columns_frame(columns: dict[str, Any]) -> pd.DataFrame:
    """A table of columns built for it (no one else holds them): each column kept as given,
    not copied into one two-dimensional block per dtype as pandas does by default; at a
    million steps those copies cost seconds and, while they are made, the memory of a second
    table. The values and dtypes are the same."""
    return pd.DataFrame(columns, copy=False)


def _samples_frame(records: PipelineRecords, workload: Workload) -> pd.DataFrame | None:
    """Per-sample records of a sample-level run: lengths, finish times and resumes."""
    if records.samples is None:
        return None
    sizes = np.diff(workload.step_offsets)
    starts = np.repeat(workload.step_offsets[:-1], sizes)
    return pd.DataFrame(
        {
            "schema_version": np.full(len(starts), SCHEMA_VERSION),
            "step": workload.step_index(),
            "sample_index": np.arange(len(starts)) - starts,
            "prompt_tokens": workload.prompt_tokens,
            "response_tokens": workload.response_tokens,
            "rollout_replica": pd.arrays.IntegerArray(
                np.zeros(len(starts), np.int64), np.ones(len(starts), bool)
            ),
            "device": pd.arrays.IntegerArray(
                np.zeros(len(starts), np.int64), np.ones(len(starts), bool)
            ),
            "finish_s": records.samples["finish_s"],
            "num_resumes": records.samples["num_resumes"],
        }
    )
