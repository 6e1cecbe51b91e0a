"""Validation: does the calibrated twin predict what the live executor measured?

`dynaresize validate --trace LIVE --costs costs.yaml` replays a recorded run in the twin from two
things only: its workload (the recorded per-sample prompt and response lengths of every step) and
its policy's decisions (each recorded resize target at its recorded step, through the `scheduled`
policy). Every stage time and every resize cost comes from the fitted cost models; none of the
run's measured times enters the prediction. The measured times are then the yardstick:

- per step: the absolute percentage error of the predicted step time, its median and 90th
  percentile (and the same per stage, to say where an error comes from);
- the whole run: predicted over measured total time, minus one;
- every resize: its critical path, measured as the executor defines it (the gap between the end
  of the last step on the old split and the start of the first step on the new one), predicted
  the same way from the twin's records; the error of their sum, and each one's.

Two differences between how the live executor and the twin lay out a run are accounted for and
stated in the report's notes rather than hidden: in one-step-off mode the executor generates the
first batch before step 0 starts while the twin counts it inside step 0, so that rollout is
taken out of the twin's step 0; and the executor spends time between steps (checkpoints, records
flushed to disk) that no cost model describes, which stays in the measured total and is reported.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dynaresize.config_io import ConfigError
from dynaresize.policies.types import Allocation, CostSource
from dynaresize.traces.io import Trace
from dynaresize.traces.phases import PipelineMode, StrategyName
from dynaresize.traces.staged_dir import staged_dir

from ..analysis_context import AnalysisContext, context_from_config
from ..config import ScenarioConfig
from ..simulation import SimResult, build_context, simulate
from ..trace_source import open_trace, trace_notes
from .resize_measure import critical_phase_spans, measured_critical_paths, step_boundaries

__all__ = [
    "ValidationInputError",
    "ValidationReport",
    "plot_validation",
    "run_validation",
    "validate_trace",
    "write_validation_outputs",
]

EXECUTOR_SOURCE = "executor"
"""`RunMeta.source` of traces the live executor wrote."""


class ValidationInputError(ConfigError):
    """A trace or cost file that cannot be validated as asked (user input, exit code 2)."""


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

    def as_dict(self) -> dict:
        """The figures of the report, JSON-ready."""
        return {
            "num_steps": len(self.per_step),
            "num_resizes": len(self.resizes),
            "pipeline_mode": self.pipeline_mode.value,
            "resize_strategy": self.strategy.value,
            "cost_source": self.cost_source.value,
            "step_ape_median": self.median_step_ape,
            "step_ape_p90": self.p90_step_ape,
            "stage_ape_median": {s: self.stage_median_ape(s) for s in ("rollout", "train", "sync")},
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


# --- what the trace recorded ----------------------------------------------------------------


def _allocations(steps: pd.DataFrame) -> list[str]:
    return [f"{t}:{r}" for t, r in zip(steps["train_gpus"], steps["rollout_gpus"], strict=True)]


def recorded_decision_schedule(trace: Trace) -> tuple[Allocation, list[dict]]:
    """The first allocation and the resizes the policy decided, as `scheduled` entries.

    The decision records are the source; the steps' allocations must agree with them (a resize
    decided after step k puts step k+1 on its target), otherwise the trace is inconsistent.
    """
    steps = trace.steps.sort_values("step", kind="stable")
    allocations = _allocations(steps)
    first = Allocation.parse(allocations[0])
    decisions = trace.decisions
    if len(decisions) == 0:
        raise ValidationInputError(
            "the trace has no decision records: validate replays the policy's recorded "
            "decisions (a live run writes one per step boundary)"
        )
    resizes = decisions[decisions["decision"] == "resize"].sort_values("step", kind="stable")
    # A resize decided after a run's (or a resumed leg's) last step never happens: only the
    # decisions followed by a step that records a resize before it took effect.
    resized_before = {
        int(k) - 1
        for k, rid in zip(steps["step"], steps["resize_id"], strict=True)
        if pd.notna(rid)
    }
    schedule = [
        {"step": int(row.step), "allocation": str(row.to_allocation)}
        for row in resizes.itertuples(index=False)
        if int(row.step) in resized_before
    ]
    expected = list(allocations[:1])
    by_step = {entry["step"]: entry["allocation"] for entry in schedule}
    step_ids = steps["step"].to_numpy(np.int64)
    for k in step_ids[:-1]:
        expected.append(by_step.get(int(k), expected[-1]))
    for index, (want, got) in enumerate(zip(expected, allocations, strict=True)):
        if want != got:
            raise ValidationInputError(
                f"decision records and steps disagree: step {int(step_ids[index])} ran on {got} "
                f"but the recorded decisions put it on {want}"
            )
    return first, schedule


def _unresized_gaps_s(steps: pd.DataFrame) -> float:
    boundaries = step_boundaries(steps)
    gaps = boundaries.loc[boundaries["resize_id"].isna(), "gap_s"].to_numpy()
    return float(np.clip(gaps, 0.0, None).sum())


def _recorded_strategy(trace: Trace, context: AnalysisContext) -> StrategyName:
    strategies = set(trace.resizes["strategy"].astype(str)) if len(trace.resizes) else set()
    if len(strategies) > 1:
        raise ValidationInputError(
            f"the trace mixes resize strategies ({', '.join(sorted(strategies))}); "
            "validate one strategy at a time"
        )
    if strategies:
        return StrategyName(strategies.pop())
    return context.scenario.pipeline.resize_strategy


def _check_workload(trace: Trace) -> None:
    samples = trace.samples
    recorded = set(samples["step"].astype(int)) if len(samples) else set()
    missing = [int(k) for k in trace.steps["step"] if int(k) not in recorded]
    if missing:
        shown = ", ".join(str(k) for k in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise ValidationInputError(
            f"the trace has no per-sample lengths for {len(missing)} of {len(trace.steps)} "
            f"steps ({shown}): validate replays the recorded workload, so every step needs "
            "its sample records"
        )


# --- the replay -----------------------------------------------------------------------------


def _prelude_outside_step_zero(trace: Trace, mode: PipelineMode) -> bool:
    return mode is PipelineMode.ONE_STEP_OFF and trace.meta.source == EXECUTOR_SOURCE


def validate_trace(
    trace: Trace,
    context: AnalysisContext,
    *,
    prelude_outside_step_zero: bool | None = None,
) -> ValidationReport:
    """Replay `trace` in the twin with `context.costs` and compare with what it measured.

    `prelude_outside_step_zero` says whether the trace's step 0 starts after the first batch was
    generated (the live executor's layout in one-step-off mode); None infers it from the trace.
    """
    if len(trace.steps) < 2:
        raise ValidationInputError(
            f"the trace has {len(trace.steps)} step(s); validate needs at least 2"
        )
    costs = context.costs
    if costs.cost_source is not CostSource.CALIBRATED:
        raise ValidationInputError(
            f"the cost parameters are marked cost_source: {costs.cost_source.value}; validate "
            "compares the twin's fitted models with a run (write them with dynaresize calibrate)"
        )
    _check_workload(trace)
    steps = trace.steps.sort_values("step", kind="stable").reset_index(drop=True)
    first, schedule = recorded_decision_schedule(trace)
    candidates = {c.label for c in context.candidates}
    used = sorted({first.label} | {e["allocation"] for e in schedule})
    missing = [label for label in used if label not in candidates]
    if missing:
        raise ValidationInputError(
            f"the trace ran on {', '.join(missing)}, not among the config's candidate splits "
            f"({', '.join(sorted(candidates))})"
        )
    strategy = _recorded_strategy(trace, context)
    scenario = context.scenario_for_steps(len(steps))
    scenario = scenario.model_copy(
        update={
            "cluster": scenario.cluster.model_copy(update={"initial_allocation": first}),
            "pipeline": scenario.pipeline.model_copy(update={"resize_strategy": strategy}),
        }
    )
    mode = scenario.pipeline.mode
    sim_context = build_context(scenario, workload=trace.to_workload())
    predicted = simulate(scenario, {"kind": "scheduled", "schedule": schedule}, context=sim_context)
    if prelude_outside_step_zero is None:
        prelude_outside_step_zero = _prelude_outside_step_zero(trace, mode)
    notes = list(context.assumptions) + trace_notes(trace)
    return _compare(
        steps,
        predicted,
        recorded_phases=trace.resizes,
        strategy=strategy,
        mode=mode,
        cost_source=costs.cost_source,
        prelude_outside_step_zero=prelude_outside_step_zero,
        notes=notes,
    )


def _compare(
    steps: pd.DataFrame,
    predicted: SimResult,
    *,
    recorded_phases: pd.DataFrame,
    strategy: StrategyName,
    mode: PipelineMode,
    cost_source: CostSource,
    prelude_outside_step_zero: bool,
    notes: list[str],
) -> ValidationReport:
    pred = predicted.steps.sort_values("step", kind="stable").reset_index(drop=True)
    pred_step_s = pred["step_s"].to_numpy(np.float64).copy()
    pred_start_s = pred["start_s"].to_numpy(np.float64).copy()
    pred_end_s = pred["end_s"].to_numpy(np.float64).copy()
    if prelude_outside_step_zero:
        prelude_s = float(pred["rollout_s"].iloc[0])
        pred_step_s[0] -= prelude_s
        pred_start_s[1:] -= prelude_s
        pred_end_s -= prelude_s
        notes.append(
            f"one-step-off: the executor generates batch 0 before step 0 starts; the twin's "
            f"step 0 is counted without that rollout ({prelude_s:.3f} s predicted)"
        )
    measured_step_s = steps["step_s"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ape = np.where(measured_step_s > 0, np.abs(pred_step_s / measured_step_s - 1.0), np.nan)
    per_step = pd.DataFrame(
        {
            "step": steps["step"].to_numpy(np.int64),
            "allocation": _allocations(steps),
            "measured_step_s": measured_step_s,
            "predicted_step_s": pred_step_s,
            "step_ape": ape,
            "measured_rollout_s": steps["rollout_s"].to_numpy(np.float64),
            "predicted_rollout_s": pred["rollout_s"].to_numpy(np.float64),
            "measured_train_s": steps["train_s"].to_numpy(np.float64),
            "predicted_train_s": pred["train_s"].to_numpy(np.float64),
            "measured_sync_s": steps["sync_s"].to_numpy(np.float64),
            "predicted_sync_s": pred["sync_s"].to_numpy(np.float64),
        }
    )
    if not np.isfinite(ape).any():
        raise ValidationInputError("every measured step time is 0: nothing to compare against")
    measured_critical = measured_critical_paths(steps)
    predicted_frame = pred.assign(start_s=pred_start_s, end_s=pred_end_s)
    predicted_critical = measured_critical_paths(predicted_frame)
    resizes = _resize_table(steps, measured_critical, predicted_critical, recorded_phases)
    measured_total_s = float(steps["end_s"].max() - steps["start_s"].min())
    predicted_total_s = float(pred_end_s.max() - pred_start_s.min())
    return ValidationReport(
        per_step=per_step,
        resizes=resizes,
        measured_total_s=measured_total_s,
        predicted_total_s=predicted_total_s,
        unmodelled_gap_s=_unresized_gaps_s(steps),
        strategy=strategy,
        pipeline_mode=mode,
        cost_source=cost_source,
        notes=notes,
    )


def _resize_table(
    steps: pd.DataFrame,
    measured: pd.DataFrame,
    predicted: pd.DataFrame,
    recorded_phases: pd.DataFrame,
) -> pd.DataFrame:
    """Measured and predicted critical paths side by side, matched by the step they follow."""
    columns = [
        "resize_id",
        "step",
        "from_allocation",
        "to_allocation",
        "measured_critical_s",
        "measured_phase_span_s",
        "predicted_critical_s",
        "critical_error",
    ]
    if len(measured) != len(predicted) or list(measured["step"]) != list(predicted["step"]):
        raise ValidationInputError(
            f"the twin replayed {len(predicted)} resize(s) after steps "
            f"{list(predicted['step'])} but the trace shows {len(measured)} after steps "
            f"{list(measured['step'])}"
        )
    allocations = dict(zip(steps["step"].astype(int), _allocations(steps), strict=True))
    spans = critical_phase_spans(recorded_phases)
    rows = []
    for m, p in zip(
        measured.itertuples(index=False), predicted.itertuples(index=False), strict=True
    ):
        error = p.critical_s / m.critical_s - 1.0 if m.critical_s > 0 else float("nan")
        rows.append(
            {
                "resize_id": m.resize_id,
                "step": m.step,
                "from_allocation": allocations[m.step],
                "to_allocation": allocations.get(m.step + 1, ""),
                "measured_critical_s": m.critical_s,
                "measured_phase_span_s": spans.get(m.resize_id, float("nan")),
                "predicted_critical_s": p.critical_s,
                "critical_error": error,
            }
        )
    return pd.DataFrame(rows, columns=columns)


# --- plot and files -------------------------------------------------------------------------


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
        (staging / "validation.json").write_text(json.dumps(report.as_dict(), indent=2))
        report.per_step.to_csv(staging / "per_step.csv", index=False)
        report.resizes.to_csv(staging / "resizes.csv", index=False)
        plot_validation(report, title=title).savefig(staging / "validation.png", dpi=110)


def run_validation(
    *,
    trace: str | os.PathLike[str],
    costs: str | os.PathLike[str],
    config: ScenarioConfig | str | os.PathLike[str] | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    lenient: bool = False,
) -> ValidationReport:
    """The `dynaresize validate` entry point: read, replay, compare, and write `out_dir`.

    `config` is a scenario or the path of a scenario YAML file; without one, the scenario is
    built from the trace's metadata and stated assumptions (twin.analysis_context).
    """
    if not Path(costs).is_file():
        raise FileNotFoundError(2, "no such cost file", str(costs))
    loaded = open_trace(trace, lenient=lenient)
    context = context_from_config(config, [loaded], costs_path=costs)
    report = validate_trace(loaded, context)
    if out_dir is not None:
        write_validation_outputs(
            report, Path(out_dir), title=f"{_run_name(Path(trace))}: twin against measured"
        )
    return report


def _run_name(trace: Path) -> str:
    """A trace directory is usually `<run>/trace`: name the run, not the folder."""
    resolved = trace.resolve()
    return resolved.parent.name if resolved.name == "trace" else resolved.name
