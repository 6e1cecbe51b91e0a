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
from matplotlib.patches import Patch

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


def _draw_device_roles(ax, steps: pd.DataFrame) -> None:
    """One horizontal track per GPU, coloured by its role during each step."""
    ordered = steps.sort_values("step")
    starts = ordered["start_s"].to_numpy(float)
    durations = (ordered["end_s"] - ordered["start_s"]).to_numpy(float)
    roles = [[_text(r) for r in row] for row in ordered["device_roles"]]
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
    steps: pd.DataFrame, resizes: pd.DataFrame | None = None, *, title: str
) -> Figure:
    """GPUs per role over run time, and the role of every single GPU (the device-to-role map),
    so one can see which devices moved and how long the pipeline stalled while they did."""
    _require_columns(steps, [*TIMELINE_STEP_COLUMNS, "device_roles"], "steps")
    if steps.empty:
        raise ValueError("steps is empty: nothing to plot")
    boundaries = _resize_boundaries(steps, resizes)
    fig = _new_figure(width_in=10, height_in=6)
    top, bottom = fig.subplots(2, 1, sharex=True)
    _draw_allocation(top, steps, boundaries)
    top.set_title("GPUs per role")
    _draw_device_roles(bottom, steps)
    bottom.set_title("Role of each GPU")
    fig.suptitle(title)
    return fig


def plot_resize_gantt(resizes: pd.DataFrame, *, title: str, max_resizes: int | None = 6) -> Figure:
    """Phases of each resize on a clock that starts when the resize starts (the paper's Fig. 6):
    critical-path phases (the pipeline waits) apart from background ones (overlapped)."""
    _require_columns(resizes, GANTT_RESIZE_COLUMNS, "resizes")
    if resizes.empty:
        raise ValueError("resizes is empty: no resize phases to plot")
    ids = sorted(resizes["resize_id"].unique())
    if max_resizes is not None:
        ids = ids[:max_resizes]
    num_rows = int(resizes["resize_id"].isin(ids).sum())
    fig = _new_figure(width_in=10, height_in=max(2.8, 1.4 + 0.32 * num_rows))
    ax = fig.subplots()
    labels: list[str] = []
    row = 0
    for resize_id in ids:
        phases = resizes[resizes["resize_id"] == resize_id].sort_values(["start_s", "end_s"])
        origin = float(phases["start_s"].min())
        first = phases.iloc[0]
        heading = (
            f"#{resize_id} {_text(first['from_allocation'])}→{_text(first['to_allocation'])}"
            f" ({_text(first['strategy'])})"
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
            labels.append(f"{heading}  {_text(phase.phase)}" if i == 0 else _text(phase.phase))
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
    ax.set_title(title)
    return fig


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


def _short(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def plot_sweep_heatmap(
    table: pd.DataFrame,
    *,
    title: str,
    x: str | None = None,
    y: str | None = None,
    value: str = "speedup",
    value_label: str = "speedup against the best static split (×)",
) -> Figure:
    """Mean of `value` over every run that shares an (x, y) cell (seeds, workloads), e.g.
    cooldown by threshold coloured by speedup; the number in each cell is that mean."""
    x, y = _sweep_axes(table, x, y)
    _require_columns(table, [x, y, value], "sweep table")
    grid = table.pivot_table(index=y, columns=x, values=value, aggfunc="mean").sort_index()
    grid = grid.sort_index(axis=1)
    fig = _new_figure(width_in=3.8 + 0.9 * grid.shape[1], height_in=2.2 + 0.5 * grid.shape[0])
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
    ax.set_title(f"{title}\n(mean over {runs_per_cell:g} runs per cell)", fontsize=10)
    return fig


def plot_sweep_scatter(
    table: pd.DataFrame,
    *,
    title: str,
    x: str | None = None,
    y: str | None = None,
    value: str = "speedup",
    value_label: str = "speedup against the best static split (×)",
) -> Figure:
    """A random sweep's points (x, y), each the mean of `value` over the runs at that point
    (seeds, workloads), coloured by it: the heatmap's counterpart when values do not repeat."""
    x, y = _sweep_axes(table, x, y)
    _require_columns(table, [x, y, value], "sweep table")
    points = table.groupby([x, y], sort=True)[value].mean().reset_index()
    fig = _new_figure(width_in=7.5, height_in=5)
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
    _require_columns(frame, needed, "break-even table")
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
    transitions: pd.DataFrame, *, title: str, max_steps: int | None = None
) -> Figure:
    """Net time saved after n steps on the new allocation, n * saving - resize cost, one line
    per transition: where it crosses zero the resize has paid for itself (break-even).

    `transitions` has one row per candidate move with columns `transition` (a label such as
    `6:2→4:4`), `resize_critical_s` and `saving_per_step_s`; optional `saving_low_s` and
    `saving_high_s` (a confidence interval of the saving) draw a band. The break-even analysis's
    own table (`twin.analysis.BreakevenReport.transitions_frame()`) is accepted as it is.
    """
    if "mean_saving_per_step_s" in transitions.columns:
        transitions = transitions_from_breakeven(transitions)
    _require_columns(
        transitions, ["transition", "resize_critical_s", "saving_per_step_s"], "transitions"
    )
    if transitions.empty:
        raise ValueError("transitions is empty: nothing to plot")
    paying = transitions[transitions["saving_per_step_s"] > 0]
    breakevens = paying["resize_critical_s"] / paying["saving_per_step_s"]
    if max_steps is None:
        max_steps = int(np.ceil(2.5 * breakevens.max())) if len(breakevens) else 50
    n = np.arange(0, max_steps + 1)
    fig = _new_figure(width_in=9 if len(transitions) <= 3 else 12, height_in=5)
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
    ax.set_title(title)
    return fig


def plot_policy_comparison(
    table: pd.DataFrame,
    *,
    title: str,
    metric: str = "total_time_s",
    metric_label: str = "total time (s)",
    by: str = "policy",
) -> Figure:
    """Mean of `metric` per policy (or any column `by`) with error bars of one standard
    deviation over the runs that share it (seeds), the number of runs printed on each bar."""
    _require_columns(table, [by, metric], "table")
    if table.empty:
        raise ValueError("table is empty: nothing to plot")
    stats = table.groupby(by, sort=True)[metric].agg(["mean", "std", "count"])
    stats["std"] = stats["std"].fillna(0.0)
    fig = _new_figure(width_in=max(5.0, 1.2 * len(stats) + 2), height_in=4.5)
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
    ax.set_title(title)
    return fig
