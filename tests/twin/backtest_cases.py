"""Backtests: twin runs whose record tables are stored as CSV files under tests/twin/backtests/.

A refactor that changes any figure of these runs (a step's start, a resize phase's end, a
decision's reason) fails `test_backtests.py`, which compares the tables cell for cell with the
stored text. The cases cover every pipeline mode with resizes (greedy, hysteresis), the shipped
presets with their own policies, and the veRL presets with lending.

When a change of figures is intended, write the files again and review the diff:

    PYTHONPATH=$PWD python tests/twin/backtest_cases.py
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for twin_scenarios

from twin_scenarios import scenario, shipped_scenario

from dynaresize.twin.config import ScenarioConfig
from dynaresize.twin.simulation import SimResult, build_context, simulate

BACKTEST_DIR = Path(__file__).resolve().parent / "backtests"
TABLES = ("steps", "resizes", "decisions")
"""Per-sample tables of the lending presets are left out: 100k rows, and every figure they
feed (finish times, resumes) shows in the steps' lending columns and times."""
FLOAT_FORMAT = "%.17g"
"""Every float with all its digits: the text is the figure, bit for bit."""


@dataclass(frozen=True)
class Case:
    name: str
    config: Callable[[], ScenarioConfig]
    policies: tuple[str, ...] = ()
    """Policy kinds to run; empty: the config's own policies."""


def _tiny(**pipeline) -> Callable[[], ScenarioConfig]:
    return lambda: scenario(pipeline=pipeline)


CASES = (
    Case("tiny_sync", _tiny(mode="sync"), ("greedy", "hysteresis")),
    Case("tiny_one_step_off", _tiny(mode="one_step_off"), ("greedy", "hysteresis")),
    Case("tiny_async_s0_drain", _tiny(mode="async", max_staleness_steps=0), ("greedy",)),
    Case("tiny_async_s1_drain", _tiny(mode="async", max_staleness_steps=1), ("greedy",)),
    Case(
        "tiny_async_s1_abort",
        _tiny(mode="async", max_staleness_steps=1, in_flight="abort"),
        ("greedy", "hysteresis"),
    ),
    Case("tiny_async_s3_drain", _tiny(mode="async", max_staleness_steps=3), ("greedy",)),
    Case(
        "tiny_stop_and_rebuild",
        _tiny(mode="one_step_off", resize_strategy="stop_and_rebuild"),
        ("greedy",),
    ),
    Case("paper", lambda: shipped_scenario("paper")),
    Case("example", lambda: shipped_scenario("example")),
    Case("verl_drc", lambda: shipped_scenario("verl_drc")),
    Case("verl_switch", lambda: shipped_scenario("verl_switch")),
)


def case_runs(case: Case) -> dict[str, SimResult]:
    """Every policy of the case, simulated on one context."""
    config = case.config()
    context = build_context(config)
    kinds = case.policies or tuple(str(p.kind) for p in config.policies)
    configs = [{"kind": kind} for kind in case.policies] or list(config.policies)
    return {
        f"{i}-{kind}": simulate(config, policy, context=context)
        for i, (kind, policy) in enumerate(zip(kinds, configs, strict=True))
    }


def table_text(frame: pd.DataFrame, columns: list[str] | None = None) -> str:
    """The CSV text of a table (the stored columns only, when given)."""
    if columns is not None:
        frame = frame[columns]
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False, float_format=FLOAT_FORMAT, lineterminator="\n")
    return buffer.getvalue()


def stored_path(case: Case, run: str, table: str) -> Path:
    return BACKTEST_DIR / case.name / f"{run}.{table}.csv"


def write_all() -> None:
    for case in CASES:
        for run, result in case_runs(case).items():
            for table in TABLES:
                path = stored_path(case, run, table)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(table_text(getattr(result, table)))
                print(f"wrote {path.relative_to(BACKTEST_DIR.parent)}")


if __name__ == "__main__":
    write_all()
