"""Pictures that compare runs: sweep heatmaps and scatters, policies side by side, and the
break-even of moves between splits."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .figure import new_figure, require_columns


def _sweep_axes(table: pd.DataFrame, x: str | None, y: str | None) -> tuple[str, str]:
    """Pick the two swept parameters: dotted-path columns that take more than one value."""
    if x is not None and y is not None:
        return x, y
    varied = [c for c in table.columns if "." in c and table[c].nunique(dropna=False) > 1]
    chosen = [c for c in (x, y) if c is not None]
    chosen += [c for c in varied if c not in chosen]
    if len(chosen) < 2:
        raise ValueError(
            "a heatmap needs two swept parameters; name them with x= and y= "
            f"(varied parameters found: {varied or 'none'})"
        )
    return chosen[0], chosen[1]


def _swept_rows(table: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """The runs that took values of both parameters: a policy without the swept knob runs at
    its own settings with those columns empty (a reference row), and has no cell."""
    swept = table[table[x].notna() & table[y].notna()]
    if swept.empty:
        raise ValueError(f"no run of the sweep table has values of both {x} and {y}")
    return swept


def _short(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _sweep_title(value: str, x: str, y: str) -> str:
    """The heading of a sweep figure when the caller gives none."""
    return f"{value} by {_short(x)} and {_short(y)}"


def plot_sweep_heatmap(
    table: pd.DataFrame,
    *,
    title: str | None = None,
    x: str | None = None,
    y: str | None = None,
    value: str = "speedup",
    value_label: str = "speedup against the best static split (×)",
) -> Figure:
    """Mean of `value` over every run that shares an (x, y) cell (seeds, workloads), e.g.
    cooldown by threshold coloured by speedup; the number in each cell is that mean.

    `x` and `y` default to the first two swept parameters; `title` heads the figure (without
    one it names the value and the two parameters).
    """
    x, y = _sweep_axes(table, x, y)
    require_columns(table, [x, y, value], "sweep table")
    table = _swept_rows(table, x, y)
    grid = table.pivot_table(index=y, columns=x, values=value, aggfunc="mean").sort_index()
    grid = grid.sort_index(axis=1)
    fig = new_figure(width_in=3.8 + 0.9 * grid.shape[1], height_in=2.2 + 0.5 * grid.shape[0])
    ax = fig.subplots()
    cells = grid.to_numpy(float)
    image = ax.imshow(cells, cmap="viridis", aspect="auto", origin="lower")
    finite = cells[np.isfinite(cells)]
    middle = float(finite.mean()) if finite.size else 0.0
    for (i, j), v in np.ndenumerate(cells):
        if np.isfinite(v):
            ax.text(
                j,
                i,
                f"{v:.3f}",
                ha="center",
                va="center",
                fontsize=8,
                color="black" if v > middle else "white",
            )
    ax.set_xticks(range(grid.shape[1]), [f"{c:g}" if _is_number(c) else c for c in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [f"{c:g}" if _is_number(c) else c for c in grid.index])
    ax.set_xlabel(_axis_label(x))
    ax.set_ylabel(_axis_label(y))
    fig.colorbar(image, ax=ax, label=value_label)
    runs_per_cell = len(table) / max(1, cells.size)
    title = title if title is not None else _sweep_title(value, x, y)
    ax.set_title(f"{title}\n(mean over {runs_per_cell:g} runs per cell)", fontsize=10)
    return fig


def plot_sweep_scatter(
    table: pd.DataFrame,
    *,
    title: str | None = None,
    x: str | None = None,
    y: str | None = None,
    value: str = "speedup",
    value_label: str = "speedup against the best static split (×)",
) -> Figure:
    """A random sweep's points (x, y), each the mean of `value` over the runs at that point
    (seeds, workloads), coloured by it: the heatmap's counterpart when values do not repeat.

    `x`, `y` and `title` as for `plot_sweep_heatmap`.
    """
    x, y = _sweep_axes(table, x, y)
    require_columns(table, [x, y, value], "sweep table")
    table = _swept_rows(table, x, y)
    points = table.groupby([x, y], sort=True)[value].mean().reset_index()
    fig = new_figure(width_in=7.5, height_in=5)
    ax = fig.subplots()
    drawn = ax.scatter(points[x], points[y], c=points[value], cmap="viridis", s=60, edgecolor="k")
    best = points.loc[points[value].idxmax()]
    ax.annotate(
        f"best {best[value]:.3f}",
        xy=(best[x], best[y]),
        xytext=(6, 6),
        textcoords="offset points",
        fontsize=8,
    )
    ax.set_xlabel(_axis_label(x))
    ax.set_ylabel(_axis_label(y))
    ax.grid(alpha=0.3)
    fig.colorbar(drawn, ax=ax, label=value_label)
    title = title if title is not None else _sweep_title(value, x, y)
    ax.set_title(f"{title}\n({len(points)} points, {len(table)} runs)", fontsize=10)
    return fig


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


_UNIT_SUFFIXES = {"_steps": "steps", "_s": "s", "_gb": "GB", "_gbps": "GB/s", "_frac": "fraction"}


def _axis_label(path: str) -> str:
    """`policy.cooldown_steps` -> `cooldown_steps (steps)`: the field name and its unit."""
    name = _short(path)
    for suffix, unit in _UNIT_SUFFIXES.items():
        if name.endswith(suffix):
            return f"{path} ({unit})"
    return path


def _present(value: object) -> bool:
    return value is not None and not pd.isna(value)


def transitions_from_breakeven(frame: pd.DataFrame) -> pd.DataFrame:
    """The break-even analysis's rows (from/to allocation, cost, mean saving, break-even
    interval in steps) in the columns `plot_breakeven_curve` draws.

    The interval's long end comes from the small saving and its short end from the large one;
    an unbounded long end means the saving may vanish (0), and a move with no interval at all
    (it never pays) gets no band.
    """
    needed = ["from_allocation", "to_allocation", "cost_s", "mean_saving_per_step_s"]
    require_columns(frame, needed, "break-even table")
    rows = []
    for row in frame.to_dict(orient="records"):
        cost_s = float(row["cost_s"])
        short, long = row.get("ci_low_steps"), row.get("ci_high_steps")
        high = cost_s / float(short) if _present(short) else float("nan")
        low = cost_s / float(long) if _present(long) else (0.0 if _present(short) else high)
        rows.append(
            {
                "transition": f"{row['from_allocation']}→{row['to_allocation']}",
                "resize_critical_s": cost_s,
                "saving_per_step_s": float(row["mean_saving_per_step_s"]),
                "saving_low_s": low,
                "saving_high_s": high,
            }
        )
    return pd.DataFrame(rows)


def plot_breakeven_curve(
    transitions: pd.DataFrame, *, title: str | None = None, max_steps: int | None = None
) -> Figure:
    """Net time saved after n steps on the new allocation, n * saving - resize cost, one line
    per transition: where it crosses zero the resize has paid for itself (break-even).

    `transitions` has one row per candidate move with columns `transition` (a label such as
    `6:2→4:4`), `resize_critical_s` and `saving_per_step_s`; optional `saving_low_s` and
    `saving_high_s` (a confidence interval of the saving) draw a band. The break-even analysis's
    own table (`twin.analysis.BreakevenReport.transitions_frame()`) is accepted as it is.
    `max_steps` ends the horizontal axis (default: 2.5 times the longest break-even); `title`
    heads the figure (without one it says what is drawn).
    """
    if "mean_saving_per_step_s" in transitions.columns:
        transitions = transitions_from_breakeven(transitions)
    require_columns(
        transitions, ["transition", "resize_critical_s", "saving_per_step_s"], "transitions"
    )
    if transitions.empty:
        raise ValueError("transitions is empty: nothing to plot")
    paying = transitions[transitions["saving_per_step_s"] > 0]
    breakevens = paying["resize_critical_s"] / paying["saving_per_step_s"]
    if max_steps is None:
        max_steps = int(np.ceil(2.5 * breakevens.max())) if len(breakevens) else 50
    n = np.arange(0, max_steps + 1)
    fig = new_figure(width_in=9 if len(transitions) <= 3 else 12, height_in=5)
    ax = fig.subplots()
    for i, row in enumerate(transitions.itertuples(index=False)):
        color = f"C{i % 10}"
        gain = n * row.saving_per_step_s - row.resize_critical_s
        label = f"{row.transition}: saves {row.saving_per_step_s:.1f} s/step"
        if row.saving_per_step_s > 0:
            steps_needed = row.resize_critical_s / row.saving_per_step_s
            label += f", break-even {steps_needed:.1f} steps"
            ax.plot(steps_needed, 0, "o", color=color)
        ax.plot(n, gain, color=color, label=label)
        low = getattr(row, "saving_low_s", None)
        high = getattr(row, "saving_high_s", None)
        if low is not None and high is not None and np.isfinite([low, high]).all():
            ax.fill_between(
                n,
                n * low - row.resize_critical_s,
                n * high - row.resize_critical_s,
                color=color,
                alpha=0.2,
            )
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xlabel("steps on the new allocation after the resize")
    ax.set_ylabel("net time saved (s)")
    ax.grid(alpha=0.3)
    if len(transitions) > 3:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    else:
        ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title if title is not None else "Net time saved after a resize, per move")
    return fig


def plot_policy_comparison(
    table: pd.DataFrame,
    *,
    title: str | None = None,
    metric: str = "total_time_s",
    metric_label: str = "total time (s)",
    by: str = "policy",
) -> Figure:
    """Mean of `metric` per policy (or any column `by`) with error bars of one standard
    deviation over the runs that share it (seeds), the number of runs printed on each bar.

    `title` heads the figure; without one it names the metric and what the bars are.
    """
    require_columns(table, [by, metric], "table")
    if table.empty:
        raise ValueError("table is empty: nothing to plot")
    stats = table.groupby(by, sort=True)[metric].agg(["mean", "std", "count"])
    stats["std"] = stats["std"].fillna(0.0)
    fig = new_figure(width_in=max(5.0, 1.2 * len(stats) + 2), height_in=4.5)
    ax = fig.subplots()
    positions = np.arange(len(stats))
    ax.bar(
        positions,
        stats["mean"],
        yerr=stats["std"],
        capsize=5,
        color=[f"C{i % 10}" for i in range(len(stats))],
        label="mean ± 1 s.d. over runs",
    )
    tops = stats["mean"] + stats["std"]
    for x_pos, top, count in zip(positions, tops, stats["count"], strict=True):
        ax.annotate(
            f"n={count}",
            xy=(x_pos, top),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            fontsize=8,
        )
    if metric == "speedup":
        ax.axhline(1.0, color="black", lw=0.8, ls="--", label="best static split (= 1)")
    ax.set_xticks(positions, [str(i) for i in stats.index], rotation=20, ha="right")
    ax.set_xlabel(by)
    ax.set_ylabel(metric_label)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.set_title(title if title is not None else f"{metric_label} by {by}")
    return fig
