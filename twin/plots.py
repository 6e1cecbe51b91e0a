"""Pictures of runs and sweeps, drawn from trace-schema DataFrames.

Every function takes DataFrames whose columns are the trace schema v1 fields
(`StepRecord`, `ResizePhaseRecord`, `DecisionRecord` in `dynaresize.traces.schema`) or a sweep
table, and returns a matplotlib `Figure` drawn on the Agg canvas. Nothing here touches pyplot's
global state, so plots can be made from worker processes, tests and notebooks alike, and a twin
run and a live run are drawn by the very same code. Callers save with `fig.savefig(path)`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

TRAIN_COLOR = "#1f77b4"
ROLLOUT_COLOR = "#ff7f0e"
CRITICAL_COLOR = "#d62728"
BACKGROUND_COLOR = "#7f7f7f"
RESIZE_MARKER_COLOR = "#9467bd"
TIMELINE_STEP_COLUMNS = (
    "step",
    "start_s",
    "end_s",
    "step_s",
    "rollout_s",
    "train_s",
    "train_gpus",
    "rollout_gpus",
)


def _new_figure(*, width_in: float, height_in: float) -> Figure:
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _require_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} lacks column(s) {', '.join(missing)}")


def _text(value: object) -> str:
    """Enum members (as read back from records) and plain strings print the same."""
    return str(getattr(value, "value", value))


def _resize_boundaries(steps: pd.DataFrame, resizes: pd.DataFrame | None) -> pd.DataFrame:
    """One row per resize: id, the step it took effect before, target allocation, critical span.

    Taken from the resize records when they are given, else from the steps' `resize_id` column
    (a run recorded without phases still shows where its allocation changed).
    """
    columns = ["resize_id", "effective_step", "to_allocation", "start_s", "end_s"]
    if resizes is not None and len(resizes):
        needed = ["resize_id", "step", "to_allocation", "start_s", "end_s", "critical"]
        _require_columns(resizes, needed, "resizes")
        rows = []
        for resize_id, phases in resizes.groupby("resize_id", sort=True):
            critical = phases[phases["critical"].astype(bool)]
            span = critical if len(critical) else phases
            rows.append(
                (
                    int(resize_id),
                    int(phases["step"].iloc[0]) + 1,
                    _text(phases["to_allocation"].iloc[0]),
                    float(span["start_s"].min()),
                    float(span["end_s"].max()),
                )
            )
        return pd.DataFrame(rows, columns=columns)
    if "resize_id" not in steps.columns:
        return pd.DataFrame(columns=columns)
    marked = steps[steps["resize_id"].notna()]
    pairs = zip(marked["train_gpus"], marked["rollout_gpus"], strict=True)
    return pd.DataFrame(
        {
            "resize_id": marked["resize_id"].astype(int).to_numpy(),
            "effective_step": marked["step"].astype(int).to_numpy(),
            "to_allocation": [f"{t}:{r}" for t, r in pairs],
            "start_s": marked["start_s"].astype(float).to_numpy(),
            "end_s": marked["start_s"].astype(float).to_numpy(),
        }
    )


def _draw_step_times(ax, steps: pd.DataFrame, boundaries: pd.DataFrame) -> None:
    ordered = steps.sort_values("step")
    x = ordered["step"].to_numpy()
    ax.plot(x, ordered["step_s"], color="black", lw=1.6, label="step time")
    ax.plot(x, ordered["rollout_s"], color=ROLLOUT_COLOR, lw=0.9, ls="--", label="rollout stage")
    ax.plot(x, ordered["train_s"], color=TRAIN_COLOR, lw=0.9, ls="--", label="train stage")
    for i, row in enumerate(boundaries.itertuples(index=False)):
        stall_s = row.end_s - row.start_s
        if stall_s > 0:
            ax.bar(
                row.effective_step - 0.5,
                stall_s,
                width=0.6,
                color=CRITICAL_COLOR,
                alpha=0.5,
                label="resize stall (critical path)" if i == 0 else None,
            )
        ax.axvline(
            row.effective_step - 0.5,
            color=RESIZE_MARKER_COLOR,
            lw=1.2,
            ls=":",
            label="resize" if i == 0 else None,
        )
        ax.annotate(
            f"→{row.to_allocation}",
            xy=(row.effective_step - 0.5, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, -2),
            textcoords="offset points",
            va="top",
            fontsize=8,
            color=RESIZE_MARKER_COLOR,
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("time (s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)


def _draw_allocation(ax, steps: pd.DataFrame, boundaries: pd.DataFrame) -> None:
    """GPUs per role against run time, as a stacked step area, with resize stalls shaded."""
    ordered = steps.sort_values("step")
    t = np.append(ordered["start_s"].to_numpy(float), ordered["end_s"].to_numpy(float)[-1])
    train = np.append(ordered["train_gpus"].to_numpy(), ordered["train_gpus"].to_numpy()[-1])
    rollout = np.append(ordered["rollout_gpus"].to_numpy(), ordered["rollout_gpus"].to_numpy()[-1])
    ax.fill_between(t, 0, train, step="post", color=TRAIN_COLOR, alpha=0.8, label="training GPUs")
    ax.fill_between(
        t, train, train + rollout, step="post", color=ROLLOUT_COLOR, alpha=0.8, label="rollout GPUs"
    )
    for i, row in enumerate(boundaries.itertuples(index=False)):
        if row.end_s > row.start_s:
            ax.axvspan(
                row.start_s,
                row.end_s,
                color=CRITICAL_COLOR,
                alpha=0.25,
                label="resize stall (critical path)" if i == 0 else None,
            )
    ax.set_xlabel("run time (s)")
    ax.set_ylabel("GPUs")
    ax.set_ylim(0, float((train + rollout).max()) * 1.15)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)


def plot_timeline(
    steps: pd.DataFrame, resizes: pd.DataFrame | None = None, *, title: str
) -> Figure:
    """Step time of every step with resize markers (the paper's Fig. 4b), and the allocation
    over run time below it, so a spike can be read against the move that caused it."""
    _require_columns(steps, TIMELINE_STEP_COLUMNS, "steps")
    if steps.empty:
        raise ValueError("steps is empty: nothing to plot")
    boundaries = _resize_boundaries(steps, resizes)
    fig = _new_figure(width_in=10, height_in=6.5)
    top, bottom = fig.subplots(2, 1, height_ratios=[3, 2])
    _draw_step_times(top, steps, boundaries)
    top.set_title("Step time per training step")
    _draw_allocation(bottom, steps, boundaries)
    bottom.set_title("Allocation over time (train + rollout GPUs)")
    fig.suptitle(title)
    return fig
