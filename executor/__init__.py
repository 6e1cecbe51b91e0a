"""The live executor: real RL post-training on a Ray cluster whose devices change role at runtime.

What it is for: running the policies of `dynaresize.policies` for real, measuring every resize
phase and writing the same records as the twin. It may import `dynaresize.policies`,
`dynaresize.traces`, and `dynaresize.twin` only for calibrated cost estimates and shared configs.
torch, transformers and ray are imported only inside this package (the `live` extra), and not by
`config` (the `live:` section), which the command line reads for every command.

The front door: `LiveConfig`, and `run_live` with its `LiveResult` (these two load torch and Ray
on first use). The folders say which process the code runs in: the driver runs this top level
(`driver`, `session`, `preflight`, `step_records`), `cluster/`, `strategies/`, `observe/` and
`run_folder/`; each Ray worker runs `worker/` with `engines/`, `rl/`, `job/` and `staging/`, and
never imports the driver side. The top's other modules (`config`, `placement_config`, `roles`,
`batch`, `faults`, `ports`) are what both sides share. `testing/` is scaffolding for tests and
benchmarks. docs/architecture.md ("The live executor in rooms") says why; docs/live-executor.md
walks through the modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import LiveConfig

if TYPE_CHECKING:
    from .driver import LiveResult, run_live

__all__ = ["LiveConfig", "LiveResult", "run_live"]


def __getattr__(name: str) -> Any:
    """`run_live` and `LiveResult` come from the driver, which imports torch and Ray: loaded on
    first use, so that importing the config needs neither."""
    if name in ("run_live", "LiveResult"):
        from . import driver

        return getattr(driver, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
