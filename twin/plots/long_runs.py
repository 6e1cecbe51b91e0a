"""Resize marks of a run with more resizes than a figure has pixel columns.

Drawn one by one, a million resizes cost hours of matplotlib; a figure 1,000 pixels wide shows
at most one per column anyway. Here a long run's resizes are reduced to one per column of steps
(the one with the longest stall, the last one's target) and each kind of mark is drawn in one
call. A run with fewer resizes is drawn one resize at a time, as before (`runs`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["LABELS_SHOWN", "MARKER_COLUMNS", "draw_column_markers", "markers_per_column"]


MARKER_COLUMNS = 1000
"""Resize markers a figure draws one by one at most: about one per pixel column of a 10-inch
figure at 100 dpi. A run with more resizes shows, per column of steps, the one with the longest
stall (and the last one's target), each kind of mark drawn in one call, `LABELS_SHOWN` targets
written."""


def markers_per_column(boundaries: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The resize boundaries to draw: all of them, or one per column of steps for a run with
    more resizes than `MARKER_COLUMNS`."""
    if len(boundaries) <= MARKER_COLUMNS:
        return boundaries
    ordered = boundaries.sort_values("effective_step", kind="stable").reset_index(drop=True)
    k = steps["step"].to_numpy(float)
    lo, hi = float(k.min()), float(k.max()) + 1.0
    scaled = (ordered["effective_step"].to_numpy(float) - lo) / (hi - lo) * MARKER_COLUMNS
    column = np.clip(np.floor(scaled), 0, MARKER_COLUMNS - 1).astype(np.int64)
    starts = np.flatnonzero(np.r_[True, column[1:] != column[:-1]])
    ends = np.r_[starts[1:], len(column)] - 1
    stall = (ordered["end_s"] - ordered["start_s"]).to_numpy(float)
    group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(column)]))
    longest = np.lexsort((-stall, group))[starts]  # the longest stall of each column
    picked = ordered.iloc[longest].reset_index(drop=True)
    picked["to_allocation"] = ordered["to_allocation"].to_numpy(object)[ends]
    return picked


LABELS_SHOWN = 20
"""Resize targets a long run's figure writes at most, evenly spread over its markers."""


def draw_column_markers(ax, shown: pd.DataFrame, *, stall_color: str, marker_color: str) -> None:
    """A long run's resize markers, one per column of steps, each kind drawn in one call."""
    x = shown["effective_step"].to_numpy(float) - 0.5
    stall = (shown["end_s"] - shown["start_s"]).to_numpy(float)
    stalled = stall > 0
    ax.vlines(
        x[stalled],
        0,
        stall[stalled],
        color=stall_color,
        alpha=0.5,
        lw=3,
        label="resize stall (critical path)",
    )
    ax.vlines(
        x,
        0,
        1,
        transform=ax.get_xaxis_transform(),
        color=marker_color,
        lw=1.2,
        ls=":",
        label="resize",
    )
    every = max(1, len(shown) // LABELS_SHOWN)
    for at, target in zip(
        x[::every], shown["to_allocation"].to_numpy(object)[::every], strict=True
    ):
        ax.annotate(
            f"→{target}",
            xy=(at, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, -2),
            textcoords="offset points",
            va="top",
            fontsize=8,
            color=marker_color,
        )
