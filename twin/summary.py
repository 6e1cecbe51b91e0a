"""The summary of one simulated run: the figures a user compares policies by.

Computed column-wise from the step and resize tables, so the same function summarises a twin run
and (later) a replayed live run. Speedups are `baseline_total_s / total_s`: above 1 is faster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ._lazy import LazyModule

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = LazyModule("pandas")


class SimSummary(BaseModel):
    """Headline figures of one run."""

    model_config = ConfigDict(frozen=True)

    policy: str = Field(description="Policy kind (or a static split's label).")
    num_steps: int = Field(ge=0, description="Training steps in the run.")
    total_s: float = Field(ge=0, description="Time from the first rollout to the last sync (s).")
    steps_per_hour: float = Field(ge=0, description="Training steps per hour.")
    tokens_per_s: float = Field(ge=0, description="Prompt plus response tokens trained per second.")
    gpu_idle_fraction: float = Field(
        ge=0, le=1, description="Share of GPU-seconds spent idle (bubbles and resize stalls)."
    )
    num_resizes: int = Field(ge=0, description="Resizes carried out.")
    thrash_count: int = Field(
        ge=0, description="Resizes undone by the next one within thrash_window_steps steps."
    )
    resize_time_s: float = Field(ge=0, description="Time the pipeline stalled for resizes (s).")
    final_allocation: str = Field(description="Split at the end of the run.")
    best_static_allocation: str = Field(description="Static split with the least total time.")
    best_static_total_s: float = Field(ge=0, description="Total time of that static split (s).")
    speedup_vs_best_static: float = Field(
        gt=0, description="best_static_total_s / total_s (above 1: faster than every static split)."
    )
    baseline_allocation: str | None = Field(
        default=None, description="Named static split compared against (e.g. the paper's 6:2)."
    )
    baseline_total_s: float | None = Field(default=None, description="Its total time (s).")
    speedup_vs_baseline: float | None = Field(
        default=None, description="baseline_total_s / total_s."
    )


def count_thrash(resizes_in_order: pd.DataFrame, *, thrash_window_steps: int) -> int:
    """Resizes that the next resize undoes (moves back to where it came from) within the window.

    Takes one row per resize with `step`, `from_allocation` and `to_allocation`, in order.
    """
    return _undone(
        resizes_in_order["step"].to_numpy(),
        resizes_in_order["from_allocation"].to_numpy(),
        resizes_in_order["to_allocation"].to_numpy(),
        thrash_window_steps,
    )


def _undone(step: np.ndarray, came_from: np.ndarray, went_to: np.ndarray, window: int) -> int:
    """Of resizes in order, how many the next one undoes within `window` steps."""
    if len(step) < 2:
        return 0
    undone = (went_to[1:] == came_from[:-1]) & (step[1:] - step[:-1] <= window)
    return int(undone.sum())


def summarize_run(
    *,
    policy: str,
    steps: pd.DataFrame,
    resizes: pd.DataFrame,
    total_s: float,
    stall_s: float,
    total_gpus: int,
    thrash_window_steps: int,
    static_totals_s: dict[str, float],
    baseline_allocation: str | None,
) -> SimSummary:
    """Summary of a run from its tables, against the static totals of every candidate.

    Reads the columns as arrays: the figures are a few sums and comparisons, which pandas'
    per-call overhead (a frame of the resizes' first rows, a column sum through its reductions)
    would cost more than.
    """
    num_steps = len(steps)
    # nansum: NaNs count as nothing, as in pandas' column sums.
    tokens = float(np.nansum(steps["tokens"].to_numpy())) if num_steps else 0.0
    idle = steps["idle_train_gpu_s"].to_numpy() + steps["idle_rollout_gpu_s"].to_numpy()
    idle_gpu_s = float(np.nansum(idle))
    idle_gpu_s += stall_s * total_gpus
    gpu_s = total_gpus * total_s
    best_label = min(static_totals_s, key=static_totals_s.__getitem__)
    best_s = static_totals_s[best_label]
    num_resizes, thrash = _resizes_and_thrash(resizes, thrash_window_steps)
    safe_total = total_s if total_s > 0 else float("nan")
    baseline_s = static_totals_s.get(baseline_allocation) if baseline_allocation else None
    final = ""
    if num_steps:
        train, rollout = steps["train_gpus"].to_numpy(), steps["rollout_gpus"].to_numpy()
        final = f"{int(train[-1])}:{int(rollout[-1])}"
    return SimSummary(
        policy=policy,
        num_steps=num_steps,
        total_s=total_s,
        steps_per_hour=3600.0 * num_steps / safe_total if total_s > 0 else 0.0,
        tokens_per_s=tokens / safe_total if total_s > 0 else 0.0,
        gpu_idle_fraction=float(np.clip(idle_gpu_s / gpu_s, 0.0, 1.0)) if gpu_s > 0 else 0.0,
        num_resizes=num_resizes,
        thrash_count=thrash,
        resize_time_s=stall_s,
        final_allocation=final,
        best_static_allocation=best_label,
        best_static_total_s=best_s,
        speedup_vs_best_static=best_s / total_s if total_s > 0 else 1.0,
        baseline_allocation=baseline_allocation,
        baseline_total_s=baseline_s,
        speedup_vs_baseline=(baseline_s / total_s) if baseline_s and total_s > 0 else None,
    )


def _resizes_and_thrash(resizes: pd.DataFrame, thrash_window_steps: int) -> tuple[int, int]:
    """Resizes in the phase table, and how many of them the next one undoes (`count_thrash` of
    the first phase row of each resize: a resize's phases share its step and splits)."""
    if resizes.empty:
        return 0, 0
    first = _first_rows(np.asarray(resizes["resize_id"].to_numpy()))
    # The first rows taken before the text columns become Python strings: a run that resizes
    # at every step has millions of phase rows and a few per resize.
    undone = _undone(
        resizes["step"].to_numpy()[first],
        resizes["from_allocation"].array.take(first).to_numpy(),
        resizes["to_allocation"].array.take(first).to_numpy(),
        thrash_window_steps,
    )
    return len(first), undone


def _first_rows(ids: np.ndarray) -> np.ndarray:
    """Where each id first occurs, by increasing id (`np.unique`'s `return_index`): where a
    run's phase table has its rows in the order of the resizes, the places where the id
    changes, found without sorting them."""
    if len(ids) and np.all(ids[1:] >= ids[:-1]):
        return np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    return np.unique(ids, return_index=True)[1]
