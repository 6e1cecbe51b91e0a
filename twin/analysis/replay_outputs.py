"""The files of a replay: replay.csv, replay.json, replay.png, decisions.csv, the fitted costs
and the resolved config, written all or nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from dynaresize.traces.jsonl_io import dumps_finite
from dynaresize.traces.staged_dir import staged_dir

from ..calibration.fit import fitted_overrides
from ..mechanisms import write_mechanisms
from .replay_result import RECORDED_MEASURED, ReplayResult
from .table_csv import write_tables_csv

_NO_DECISIONS = ["run", "step", "decision", "from_allocation", "to_allocation"]
"""The columns of a decisions table without a decision."""

DECISION_PIECE_ROWS = 200_000
"""Rows of decisions.csv built and written at a time."""


def _decision_frames(result: ReplayResult) -> list[tuple[str, pd.DataFrame]]:
    """(run, its decisions) of every run with decisions: the recorded run's controller (where
    its log kept its decisions) and each replayed policy."""
    frames = []
    if len(result.recorded_decisions):
        frames.append((RECORDED_MEASURED, result.recorded_decisions))
    frames += [(name, run.decisions) for name, run in result.policies.items() if len(run.decisions)]
    return frames


def _with_run_first(table: pd.DataFrame) -> pd.DataFrame:
    return table[["run", *[c for c in table.columns if c != "run"]]]


def decisions_table(result: ReplayResult) -> pd.DataFrame:
    """Every compared run's decisions in one table, a `run` column first: the recorded run's
    controller (where its log kept its decisions) and each replayed policy."""
    frames = [frame.assign(run=name) for name, frame in _decision_frames(result)]
    if not frames:
        return pd.DataFrame(columns=_NO_DECISIONS)
    return _with_run_first(pd.concat(frames, ignore_index=True))


def decision_pieces(result: ReplayResult) -> Iterator[pd.DataFrame]:
    """`decisions_table` a piece of rows at a time, each with the table's columns and dtypes
    (a piece is concatenated with every run's empty frame, which sets them as the whole
    concatenation does): the whole table is never built."""
    frames = _decision_frames(result)
    if not frames:
        yield pd.DataFrame(columns=_NO_DECISIONS)
        return
    empty = [frame.iloc[:0].assign(run=name) for name, frame in frames]
    for name, frame in frames:
        for lo in range(0, len(frame), DECISION_PIECE_ROWS):
            part = frame.iloc[lo : lo + DECISION_PIECE_ROWS].assign(run=name)
            yield _with_run_first(pd.concat([*empty, part], ignore_index=True))


def plot_replay(result: ReplayResult, *, title: str):
    """Totals of every compared run, and measured against predicted step times."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 8), layout="constrained")
    top, bottom = fig.subplots(2, 1, height_ratios=[1, 1])
    table = result.table
    colors = {"recorded": "C0", "static": "C7", "policy": "C2", "optimum": "C3"}
    positions = np.arange(len(table))
    top.barh(positions, table["total_h"], color=[colors[k] for k in table["kind"]])
    top.set_yticks(positions, table["name"])
    top.invert_yaxis()
    top.axvline(result.optimum.total_s / 3600, color="C3", lw=0.8, ls="--")
    top.set_xlabel("total time (h)")
    top.set_title(title)
    top.grid(axis="x", alpha=0.3)
    measured = result.measured_steps
    predicted = result.predicted_steps
    bottom.plot(measured["step"], measured["step_s"], lw=0.8, label="recorded (measured)")
    bottom.plot(predicted["step"], predicted["step_s"], lw=0.8, label="recorded (twin)")
    for name, run in result.policies.items():
        bottom.plot(run.steps["step"], run.steps["step_s"], lw=0.6, alpha=0.7, label=name)
    bottom.set_xlabel("step")
    bottom.set_ylabel("step time (s)")
    bottom.grid(alpha=0.3)
    bottom.legend(fontsize=8, loc="best")
    return fig


def write_replay_outputs(result: ReplayResult, out_dir: Path, *, title: str, scenario) -> None:
    """replay.csv, replay.json, replay.png, fitted costs and the resolved config, all or nothing.

    Files are written to a temporary folder beside `out_dir` and then moved in.
    """
    with staged_dir(out_dir, replace=False) as staging:
        result.table.to_csv(staging / "replay.csv", index=False)
        payload = {
            "assumed": [f.as_dict() for f in result.assumed],
            "warnings": list(result.warnings),
            "table": result.table.to_dict(orient="records"),
            "prediction_error": result.prediction_error,
            "step_time_mape": result.step_time_mape,
            "optimum_num_resizes": result.optimum.num_resizes,
            "fit": None if result.fit is None else result.fit.quality_lines(),
            "notes": result.notes,
        }
        (staging / "replay.json").write_text(dumps_finite(payload) + "\n")
        (staging / "config.json").write_text(scenario.model_dump_json(indent=2))
        if result.fit is not None:
            import yaml

            text = yaml.safe_dump(fitted_overrides(result.fit), sort_keys=False)
            (staging / "costs.yaml").write_text(text)
        result.predicted_steps.to_parquet(staging / "predicted_steps.parquet")
        result.optimal_schedule.to_csv(staging / "optimal_schedule.csv", index=False)
        write_tables_csv(decision_pieces(result), staging / "decisions.csv")
        plot_replay(result, title=title).savefig(staging / "replay.png", dpi=110)
        if result.mechanisms is not None:
            write_mechanisms(result.mechanisms, staging, title=f"{title}: mechanisms")
