"""What a validation reports: the twin's prediction of a recorded run against what it measured,
as figures (step, stage, total and resize critical-path errors), text lines, a plot and files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dynaresize.policies.types import CostSource
from dynaresize.traces.jsonl_io import dumps_finite
from dynaresize.traces.phases import PipelineMode, StrategyName
from dynaresize.traces.staged_dir import staged_dir

__all__ = ["ValidationReport", "plot_validation", "write_validation_outputs"]


@dataclass(frozen=True)
class ValidationReport:
    """Predicted against measured, step by step, resize by resize and in total."""

    per_step: pd.DataFrame
    """step, allocation, measured/predicted step, rollout, train and sync times (s), step APE."""
    resizes: pd.DataFrame
    """resize_id, step, from/to allocation, measured/predicted critical path (s), error."""
    measured_total_s: float
    predicted_total_s: float
    unmodelled_gap_s: float
    """Measured time between steps at boundaries without a resize (checkpoints, flushes)."""
    strategy: StrategyName
    pipeline_mode: PipelineMode
    cost_source: CostSource
    notes: list[str] = field(default_factory=list)
    assumed: tuple = ()
    """The `run_facts.AssumedFact`s the replayed scenario rests on."""
    warnings: tuple[str, ...] = ()
    """Costs used outside the range they were fitted on."""

    @property
    def step_ape(self) -> np.ndarray:
        return self.per_step["step_ape"].dropna().to_numpy(np.float64)

    @property
    def median_step_ape(self) -> float:
        return float(np.median(self.step_ape))

    @property
    def p90_step_ape(self) -> float:
        return float(np.percentile(self.step_ape, 90))

    @property
    def total_time_error(self) -> float:
        """Predicted over measured total time, minus one (signed)."""
        return self.predicted_total_s / self.measured_total_s - 1.0

    @property
    def resize_critical_error(self) -> float | None:
        """Sum of predicted over sum of measured critical paths, minus one; None without one."""
        if len(self.resizes) == 0:
            return None
        measured = float(self.resizes["measured_critical_s"].sum())
        if measured <= 0:
            return None
        return float(self.resizes["predicted_critical_s"].sum()) / measured - 1.0

    def stage_median_ape(self, stage: str) -> float | None:
        measured = self.per_step[f"measured_{stage}_s"].to_numpy(np.float64)
        predicted = self.per_step[f"predicted_{stage}_s"].to_numpy(np.float64)
        ok = measured > 0
        if not ok.any():
            return None
        return float(np.median(np.abs(predicted[ok] / measured[ok] - 1.0)))

    def own_variation_ape(self, column: str = "step") -> float | None:
        """How far the run's own steps vary: each step predicted by the median of the other
        steps measured on its split, the median absolute error of that. A model that gives one
        time per split and stage does no better on this run; None where no split has two steps.
        """
        measured = self.per_step[f"measured_{column}_s"].to_numpy(np.float64)
        splits = self.per_step["allocation"].astype(str).to_numpy()
        errors = [
            abs(float(np.median(others)) / measured[i] - 1.0)
            for i in range(len(measured))
            if measured[i] > 0
            for others in [measured[(splits == splits[i]) & (np.arange(len(measured)) != i)]]
            if len(others)
        ]
        return float(np.median(errors)) if errors else None

    def as_dict(self) -> dict:
        """The figures of the report, JSON-ready."""
        return {
            "assumed": [f.as_dict() for f in self.assumed],
            "warnings": list(self.warnings),
            "num_steps": len(self.per_step),
            "num_resizes": len(self.resizes),
            "pipeline_mode": self.pipeline_mode.value,
            "resize_strategy": self.strategy.value,
            "cost_source": self.cost_source.value,
            "step_ape_median": self.median_step_ape,
            "step_ape_p90": self.p90_step_ape,
            "stage_ape_median": {s: self.stage_median_ape(s) for s in ("rollout", "train", "sync")},
            "own_variation_step_ape_median": self.own_variation_ape(),
            "own_variation_stage_ape_median": {
                s: self.own_variation_ape(s) for s in ("rollout", "train", "sync")
            },
            "measured_total_s": self.measured_total_s,
            "predicted_total_s": self.predicted_total_s,
            "total_time_error": self.total_time_error,
            "unmodelled_gap_s": self.unmodelled_gap_s,
            "resize_critical_error": self.resize_critical_error,
            "resizes": self.resizes.to_dict(orient="records"),
            "notes": self.notes,
        }

    def summary_lines(self) -> list[str]:
        lines = [
            f"steps: {len(self.per_step)}, per-step absolute error: median "
            f"{self.median_step_ape:.1%}, p90 {self.p90_step_ape:.1%}",
            "per stage, median absolute error: "
            + ", ".join(
                f"{s} {'n/a' if e is None else f'{e:.1%}'}"
                for s in ("rollout", "train", "sync")
                for e in [self.stage_median_ape(s)]
            ),
            self._own_variation_line(),
            f"total time: measured {self.measured_total_s:.3f} s, predicted "
            f"{self.predicted_total_s:.3f} s, error {self.total_time_error:+.1%} (of which "
            f"{self.unmodelled_gap_s:.3f} s measured between steps is not modelled)",
        ]
        error = self.resize_critical_error
        if error is None:
            lines.append("resize critical path: no resize in the trace")
        else:
            lines.append(
                f"resize critical path ({len(self.resizes)} resizes, {self.strategy.value}): "
                f"measured {self.resizes['measured_critical_s'].sum():.3f} s, predicted "
                f"{self.resizes['predicted_critical_s'].sum():.3f} s, error {error:+.1%}"
            )
            for row in self.resizes.itertuples(index=False):
                lines.append(
                    f"  resize {row.resize_id} after step {row.step} "
                    f"{row.from_allocation} -> {row.to_allocation}: measured "
                    f"{row.measured_critical_s:.3f} s (recorded critical phases "
                    f"{row.measured_phase_span_s:.3f} s), predicted "
                    f"{row.predicted_critical_s:.3f} s ({row.critical_error:+.1%})"
                )
        return lines

    def _own_variation_line(self) -> str:
        floor = self.own_variation_ape()
        if floor is None:
            return "the run's own variation: no split holds two steps"
        stages = ", ".join(
            f"{s} {'n/a' if e is None else f'{e:.1%}'}"
            for s in ("rollout", "train", "sync")
            for e in [self.own_variation_ape(s)]
        )
        return (
            "the run's own variation (each step predicted by the median of the other steps on "
            f"its split, as one time per split would): median {floor:.1%}; per stage {stages}"
        )


def plot_validation(report: ValidationReport, *, title: str):
    """Step times over the run, and predicted against measured with the identity line."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.6), layout="constrained")
    timeline, scatter = fig.subplots(1, 2, width_ratios=[1.6, 1])
    frame = report.per_step
    timeline.plot(frame["step"], frame["measured_step_s"], marker="o", ms=3, label="measured")
    timeline.plot(frame["step"], frame["predicted_step_s"], marker="s", ms=3, label="twin")
    for i, row in enumerate(report.resizes.itertuples(index=False)):
        timeline.axvline(
            row.step + 0.5,
            color="C3",
            lw=0.8,
            ls="--",
            label="resize" if i == 0 else None,
        )
    timeline.set_xlabel("step")
    timeline.set_ylabel("step time (s)")
    timeline.set_title(title)
    timeline.grid(alpha=0.3)
    timeline.legend(fontsize=8)
    measured = frame["measured_step_s"].to_numpy()
    predicted = frame["predicted_step_s"].to_numpy()
    scatter.scatter(measured, predicted, s=14, label="steps")
    if len(report.resizes):
        scatter.scatter(
            report.resizes["measured_critical_s"],
            report.resizes["predicted_critical_s"],
            marker="x",
            color="C3",
            label="resize critical paths",
        )
        measured = np.concatenate([measured, report.resizes["measured_critical_s"]])
        predicted = np.concatenate([predicted, report.resizes["predicted_critical_s"]])
    top = float(np.nanmax(np.concatenate([measured, predicted]))) * 1.05 or 1.0
    scatter.plot([0, top], [0, top], color="0.5", lw=0.8, label="predicted = measured")
    scatter.set_xlim(0, top)
    scatter.set_ylim(0, top)
    scatter.set_xlabel("measured (s)")
    scatter.set_ylabel("predicted by the twin (s)")
    scatter.set_title(
        f"median step error {report.median_step_ape:.1%}, total {report.total_time_error:+.1%}"
    )
    scatter.grid(alpha=0.3)
    scatter.legend(fontsize=8, loc="upper left")
    return fig


def write_validation_outputs(report: ValidationReport, out_dir: Path, *, title: str) -> None:
    """validation.json, per_step.csv, resizes.csv and validation.png, all or nothing."""
    with staged_dir(out_dir, replace=False) as staging:
        (staging / "validation.json").write_text(dumps_finite(report.as_dict()))
        report.per_step.to_csv(staging / "per_step.csv", index=False)
        report.resizes.to_csv(staging / "resizes.csv", index=False)
        plot_validation(report, title=title).savefig(staging / "validation.png", dpi=110)
