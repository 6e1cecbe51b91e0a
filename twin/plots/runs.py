"""Pictures of one run: step times and splits over time, device roles, and resize phases.

Every function takes the trace schema's step and resize tables, so a twin run and a live run are
drawn by the very same code.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .figure import as_text, new_figure, require_columns
from .long_runs import MARKER_COLUMNS, draw_column_markers, markers_per_column

TRAIN_COLOR = "#1f77b4"
ROLLOUT_COLOR = "#ff7f0e"
CRITICAL_COLOR = "#d62728"
BACKGROUND_COLOR = "#7f7f7f"
RESIZE_MARKER_COLOR = "#9467bd"
GANTT_RESIZE_COLUMNS = (
    "resize_id",
    "phase",
    "strategy",
    "from_allocation",
    "to_allocation",
    "start_s",
    "end_s",
    "critical",
)
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


def _resize_boundaries(steps: pd.DataFrame, resizes: pd.DataFrame | None) -> pd.DataFrame:
    """One row per resize: id, the step it took effect before, target allocation, critical span.

    Taken from the resize records when they are given, else from the steps' `resize_id` column
    (a run recorded without phases still shows where its allocation changed).
    """
    columns = ["resize_id", "effective_step", "to_allocation", "start_s", "end_s"]
    if resizes is not None and len(resizes):
        needed = ["resize_id", "step", "to_allocation", "start_s", "end_s", "critical"]
        require_columns(resizes, needed, "resizes")
        return _boundaries_of_records(resizes, columns)
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


def _boundaries_of_records(resizes: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """`_resize_boundaries` from resize records, a column at a time: each resize's first
    record gives its step and target, its critical phases (all, if none is) its span."""
    ids = resizes["resize_id"].to_numpy(np.int64)
    start, end = resizes["start_s"].to_numpy(float), resizes["end_s"].to_numpy(float)
    critical = resizes["critical"].astype(bool).to_numpy()
    unique, inverse = np.unique(ids, return_inverse=True)
    first = _first_rows(inverse, len(unique))
    any_critical = np.zeros(len(unique), dtype=bool)
    np.logical_or.at(any_critical, inverse, critical)
    used = critical | ~any_critical[inverse]
    lo, hi = np.full(len(unique), np.inf), np.full(len(unique), -np.inf)
    np.minimum.at(lo, inverse[used], start[used])
    np.maximum.at(hi, inverse[used], end[used])
    targets = resizes["to_allocation"].to_numpy(object)[first]
    return pd.DataFrame(
        {
            "resize_id": unique,
            "effective_step": resizes["step"].to_numpy(np.int64)[first] + 1,
            "to_allocation": [as_text(v) for v in targets],
            "start_s": lo,
            "end_s": hi,
        },
        columns=columns,
    )


def _first_rows(inverse: np.ndarray, num_groups: int) -> np.ndarray:
    """Position of the first row of each group, rows in their order."""
    first = np.full(num_groups, len(inverse), dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(len(inverse), dtype=np.int64))
    return first


def run_title(steps: pd.DataFrame, boundaries: pd.DataFrame) -> str:
    """The heading of a run's figure when the caller gives none: its size and its resizes."""
    return f"Run of {len(steps)} steps, {len(boundaries)} resize(s)"


def _long_run_markers(boundaries: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame | None:
    """One marker per pixel column where a run has more resizes than columns; None otherwise.
    Reduced once per figure, for every panel that draws them."""
    return markers_per_column(boundaries, steps) if len(boundaries) > MARKER_COLUMNS else None


def _draw_step_times(
    ax, steps: pd.DataFrame, boundaries: pd.DataFrame, shown: pd.DataFrame | None
) -> None:
    ordered = steps.sort_values("step")
    x = ordered["step"].to_numpy()
    ax.plot(x, ordered["step_s"], color="black", lw=1.6, label="step time")
    ax.plot(x, ordered["rollout_s"], color=ROLLOUT_COLOR, lw=0.9, ls="--", label="rollout stage")
    ax.plot(x, ordered["train_s"], color=TRAIN_COLOR, lw=0.9, ls="--", label="train stage")
    # where the legend goes is searched over every point drawn: for a long run, not searched
    legend_at = "best" if len(steps) <= MARKER_COLUMNS else "upper left"
    if shown is not None:
        draw_column_markers(
            ax,
            shown,
            stall_color=CRITICAL_COLOR,
            marker_color=RESIZE_MARKER_COLOR,
        )
        boundaries = boundaries.iloc[:0]
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
    ax.legend(loc=legend_at, fontsize=8)


def _draw_allocation(
    ax, steps: pd.DataFrame, boundaries: pd.DataFrame, shown: pd.DataFrame | None
) -> None:
    """GPUs per role against run time, as a stacked step area, with resize stalls shaded."""
    ordered = steps.sort_values("step")
    t = np.append(ordered["start_s"].to_numpy(float), ordered["end_s"].to_numpy(float)[-1])
    train = np.append(ordered["train_gpus"].to_numpy(), ordered["train_gpus"].to_numpy()[-1])
    rollout = np.append(ordered["rollout_gpus"].to_numpy(), ordered["rollout_gpus"].to_numpy()[-1])
    ax.fill_between(t, 0, train, step="post", color=TRAIN_COLOR, alpha=0.8, label="training GPUs")
    ax.fill_between(
        t, train, train + rollout, step="post", color=ROLLOUT_COLOR, alpha=0.8, label="rollout GPUs"
    )
    if shown is not None:
        stalled = shown[shown["end_s"] > shown["start_s"]]
        ax.broken_barh(
            list(zip(stalled["start_s"], stalled["end_s"] - stalled["start_s"], strict=True)),
            (0, float((train + rollout).max()) * 1.15),
            color=CRITICAL_COLOR,
            alpha=0.25,
            label="resize stall (critical path)",
        )
        boundaries = boundaries.iloc[:0]
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
    steps: pd.DataFrame, resizes: pd.DataFrame | None = None, *, title: str | None = None
) -> Figure:
    """Step time of every step with resize markers (the paper's Fig. 4b), and the allocation
    over run time below it, so a spike can be read against the move that caused it.

    `title` heads the figure; without one it says how many steps and resizes the run has.
    """
    require_columns(steps, TIMELINE_STEP_COLUMNS, "steps")
    if steps.empty:
        raise ValueError("steps is empty: nothing to plot")
    boundaries = _resize_boundaries(steps, resizes)
    fig = new_figure(width_in=10, height_in=6.5)
    top, bottom = fig.subplots(2, 1, height_ratios=[3, 2])
    shown = _long_run_markers(boundaries, steps)
    _draw_step_times(top, steps, boundaries, shown)
    top.set_title("Step time per training step")
    _draw_allocation(bottom, steps, boundaries, shown)
    bottom.set_title("Allocation over time (train + rollout GPUs)")
    fig.suptitle(title if title is not None else run_title(steps, boundaries))
    return fig


def _draw_device_roles(ax, steps: pd.DataFrame) -> None:
    """One horizontal track per GPU, coloured by its role during each step."""
    ordered = steps.sort_values("step")
    starts = ordered["start_s"].to_numpy(float)
    durations = (ordered["end_s"] - ordered["start_s"]).to_numpy(float)
    roles = [[as_text(r) for r in row] for row in ordered["device_roles"]]
    num_devices = max(len(r) for r in roles)
    for device in range(num_devices):
        for role, color in (("train", TRAIN_COLOR), ("rollout", ROLLOUT_COLOR)):
            spans = [
                (start, duration)
                for start, duration, row in zip(starts, durations, roles, strict=True)
                if device < len(row) and row[device] == role
            ]
            ax.broken_barh(spans, (device - 0.4, 0.8), color=color)
    ax.set_yticks(range(num_devices), [f"GPU {d}" for d in range(num_devices)])
    ax.invert_yaxis()
    ax.set_xlabel("run time (s)")
    ax.set_ylabel("device")
    ax.legend(
        handles=[
            Patch(color=TRAIN_COLOR, label="training role"),
            Patch(color=ROLLOUT_COLOR, label="rollout role"),
        ],
        loc="upper right",
        fontsize=8,
    )


def plot_allocation(
    steps: pd.DataFrame, resizes: pd.DataFrame | None = None, *, title: str | None = None
) -> Figure:
    """GPUs per role over run time, and the role of every single GPU (the device-to-role map),
    so one can see which devices moved and how long the pipeline stalled while they did.

    `title` heads the figure; without one it says how many steps and resizes the run has.
    """
    require_columns(steps, [*TIMELINE_STEP_COLUMNS, "device_roles"], "steps")
    if steps.empty:
        raise ValueError("steps is empty: nothing to plot")
    boundaries = _resize_boundaries(steps, resizes)
    fig = new_figure(width_in=10, height_in=6)
    top, bottom = fig.subplots(2, 1, sharex=True)
    _draw_allocation(top, steps, boundaries, _long_run_markers(boundaries, steps))
    top.set_title("GPUs per role")
    _draw_device_roles(bottom, steps)
    bottom.set_title("Role of each GPU")
    fig.suptitle(title if title is not None else run_title(steps, boundaries))
    return fig


def plot_resize_gantt(
    resizes: pd.DataFrame, *, title: str | None = None, max_resizes: int | None = 6
) -> Figure:
    """Phases of each resize on a clock that starts when the resize starts (the paper's Fig. 6):
    critical-path phases (the pipeline waits) apart from background ones (overlapped).

    At most `max_resizes` resizes, the first ones (None: all). `title` heads the figure; without
    one it says how many resizes are drawn.
    """
    require_columns(resizes, GANTT_RESIZE_COLUMNS, "resizes")
    if resizes.empty:
        raise ValueError("resizes is empty: no resize phases to plot")
    ids = sorted(resizes["resize_id"].unique())
    num_resizes = len(ids)
    if max_resizes is not None:
        ids = ids[:max_resizes]
    num_rows = int(resizes["resize_id"].isin(ids).sum())
    fig = new_figure(width_in=10, height_in=max(2.8, 1.4 + 0.32 * num_rows))
    ax = fig.subplots()
    labels: list[str] = []
    row = 0
    for resize_id in ids:
        phases = resizes[resizes["resize_id"] == resize_id].sort_values(["start_s", "end_s"])
        origin = float(phases["start_s"].min())
        first = phases.iloc[0]
        heading = (
            f"#{resize_id} {as_text(first['from_allocation'])}→{as_text(first['to_allocation'])}"
            f" ({as_text(first['strategy'])})"
        )
        for i, phase in enumerate(phases.itertuples(index=False)):
            start = float(phase.start_s) - origin
            duration = float(phase.end_s) - float(phase.start_s)
            color = CRITICAL_COLOR if bool(phase.critical) else BACKGROUND_COLOR
            ax.barh(row, duration, left=start, height=0.7, color=color)
            ax.annotate(
                f"{duration:.1f} s",
                xy=(start + duration, row),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
            )
            labels.append(f"{heading}  {as_text(phase.phase)}" if i == 0 else as_text(phase.phase))
            row += 1
        critical = phases[phases["critical"].astype(bool)]
        if len(critical):
            path_s = float(critical["end_s"].max()) - origin
            ax.axvline(path_s, color=CRITICAL_COLOR, lw=0.8, ls=":")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time since the resize began (s)")
    ax.set_ylabel("resize phase")
    ax.grid(axis="x", alpha=0.3)
    fig.legend(
        handles=[
            Patch(color=CRITICAL_COLOR, label="critical path (pipeline waits)"),
            Patch(color=BACKGROUND_COLOR, label="background (overlapped with a step)"),
        ],
        loc="outside lower center",
        ncols=2,
        fontsize=8,
    )
    if title is None:
        shown = f"the first {len(ids)} of" if len(ids) < num_resizes else "all"
        title = f"Phases of {shown} {num_resizes} resize(s)"
    ax.set_title(title)
    return fig
