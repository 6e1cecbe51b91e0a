"""The mechanisms of moving GPUs side by side: total time of each (as run and its offline
optimum) and the step times of the runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .figure import new_figure, require_columns

MECHANISM_TABLE_COLUMNS = ("mechanism", "kind", "total_s")


def plot_mechanisms(
    table: pd.DataFrame, step_times: dict[str, pd.DataFrame], *, title: str | None = None
) -> Figure:
    """Bars of total time per mechanism (runs solid, offline optima hatched, the best static
    split dashed) over a panel of each run's step times (`step`, `step_s`)."""
    require_columns(table, MECHANISM_TABLE_COLUMNS, "mechanism table")
    if table.empty:
        raise ValueError("mechanism table is empty: nothing to plot")
    fig = new_figure(width_in=11.0, height_in=8.0)
    top, bottom = fig.subplots(2, 1, height_ratios=[1, 1])
    hours = table["total_s"].to_numpy(np.float64) / 3600.0
    positions = np.arange(len(table))
    optimum = (table["kind"] == "offline optimum").to_numpy()
    labels = [
        f"{m} (optimum)" if o else str(m) for m, o in zip(table["mechanism"], optimum, strict=True)
    ]
    colors = [f"C{i % 10}" for i in range(len(table))]
    bars = top.barh(positions, hours, color=colors)
    for bar, is_optimum in zip(bars, optimum, strict=True):
        if is_optimum:
            bar.set_hatch("//")
            bar.set_alpha(0.6)
    top.axvline(hours[0], color="black", lw=0.8, ls="--", label="best static split")
    top.set_yticks(positions, labels)
    top.invert_yaxis()
    top.set_xlabel("total time (h)")
    top.set_title(title or "mechanisms of moving GPUs between roles")
    top.grid(axis="x", alpha=0.3)
    for name, steps in step_times.items():
        require_columns(steps, ["step", "step_s"], f"steps of {name}")
        bottom.plot(steps["step"], steps["step_s"], lw=0.8, label=name)
    bottom.set_xlabel("step")
    bottom.set_ylabel("step time (s)")
    bottom.grid(alpha=0.3)
    if step_times:
        bottom.legend(fontsize=8, loc="best")
    return fig
