"""Analysis of a recorded run: what dynamic resizing would have done on it, and when a resize
pays for itself.

- `replay` compares, on the trace's own workload and costs fitted to it, the recorded run (as
  measured and as the twin predicts it), every static split, the configured policies and the
  offline optimum (`dynaresize run --mode replay`);
- `breakeven` gives the break-even of every move between splits with a bootstrap interval, how
  long imbalances last, and settings a user can act on; `trace_breakeven` does so for a trace
  and prints the report (`dynaresize breakeven`);
- `table_csv` writes a long table as CSV with pandas' bytes, a column at a time (a replay's
  decisions.csv).

What it may import: the twin's core and `dynaresize.twin.calibration` (costs fitted to the
trace), `dynaresize.policies`, `dynaresize.traces` and `dynaresize.config_io`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .breakeven import BreakevenReport
    from .replay import ReplayResult, plot_replay, replay_trace, run_replay
    from .trace_breakeven import breakeven_for_trace, report_lines

__all__ = [
    "BreakevenReport",
    "ReplayResult",
    "breakeven_for_trace",
    "plot_replay",
    "replay_trace",
    "report_lines",
    "run_replay",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BreakevenReport": "breakeven",
        "breakeven_for_trace": "trace_breakeven",
        "report_lines": "trace_breakeven",
        "ReplayResult": "replay",
        "plot_replay": "replay",
        "replay_trace": "replay",
        "run_replay": "replay",
    },
)
