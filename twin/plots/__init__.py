"""Pictures of runs and sweeps, drawn from trace-schema DataFrames.

Every function takes DataFrames whose columns are the trace schema v1 fields
(`StepRecord`, `ResizePhaseRecord`, `DecisionRecord` in `dynaresize.traces.schema`) or a sweep
table, and returns a matplotlib `Figure` drawn on the Agg canvas. Every one takes an optional
`title=` keyword; without it the figure is headed by what it shows. Nothing here touches pyplot's
global state, so plots can be made from worker processes, tests and notebooks alike, and a twin
run and a live run are drawn by the very same code. Callers save with `fig.savefig(path)`.

What it may import: matplotlib, numpy and pandas; nothing else of the project (tables come in
as DataFrames). The twin imports it on a run's first plot, not with the package.
"""

from .comparisons import (
    plot_breakeven_curve,
    plot_policy_comparison,
    plot_sweep_heatmap,
    plot_sweep_scatter,
    transitions_from_breakeven,
)
from .mechanisms import plot_mechanisms
from .runs import (
    BACKGROUND_COLOR,
    CRITICAL_COLOR,
    GANTT_RESIZE_COLUMNS,
    RESIZE_MARKER_COLOR,
    ROLLOUT_COLOR,
    TIMELINE_STEP_COLUMNS,
    TRAIN_COLOR,
    plot_allocation,
    plot_resize_gantt,
    plot_timeline,
)

__all__ = [
    "BACKGROUND_COLOR",
    "CRITICAL_COLOR",
    "GANTT_RESIZE_COLUMNS",
    "RESIZE_MARKER_COLOR",
    "ROLLOUT_COLOR",
    "TIMELINE_STEP_COLUMNS",
    "TRAIN_COLOR",
    "plot_allocation",
    "plot_breakeven_curve",
    "plot_mechanisms",
    "plot_policy_comparison",
    "plot_resize_gantt",
    "plot_sweep_heatmap",
    "plot_sweep_scatter",
    "plot_timeline",
    "transitions_from_breakeven",
]
