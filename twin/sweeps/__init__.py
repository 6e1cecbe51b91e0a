"""Sweeps: many twin runs over a space of settings, as one tidy table.

- `space` parses swept parameters (dotted paths, value lists or ranges) and applies a point of
  the space to a scenario;
- `plan` expands the space into runs (grid or random sample, times workloads or traces, times
  seeds), each keyed by what determines it, and hands them out in groups that share a context;
- `sweep` runs the groups on local processes or a Ray cluster and assembles the table
  (`run_sweep`);
- `tasks` is the work one group does in whichever process it lands on: one context built, its
  baseline, and its runs;
- `lockstep` advances a group's runs of one policy kind together, as arrays over the runs, and
  `vector_policies` holds the kinds' vectorised decisions (other kinds run one by one);
- `store` keeps finished runs on disk, so an interrupted or extended sweep redoes none of them.

What it may import: the twin's core, `dynaresize.policies`, `dynaresize.traces` and
`dynaresize.config_io`; Ray only when a sweep is given a Ray address.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .plan import SweepPlan, plan_sweep
    from .space import SweepParam, apply_overrides, parse_param
    from .sweep import run_sweep, sweep_summary

__all__ = [
    "SweepParam",
    "SweepPlan",
    "apply_overrides",
    "parse_param",
    "plan_sweep",
    "run_sweep",
    "sweep_summary",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "SweepParam": "space",
        "apply_overrides": "space",
        "parse_param": "space",
        "SweepPlan": "plan",
        "plan_sweep": "plan",
        "run_sweep": "sweep",
        "sweep_summary": "sweep",
    },
)
