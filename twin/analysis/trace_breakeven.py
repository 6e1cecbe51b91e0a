"""Break-even from a trace: the report of `dynaresize breakeven`, and its lines on a terminal.

The per-step savings come from the twin's step times on the trace's own workload (costs fitted
to the trace unless the user gave them); the resize cost is the mean measured stall of the
trace's own resizes when it has any, else the twin's resize model (`breakeven.py` has the
arithmetic and the advice rules).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd

from dynaresize.config_io import ConfigError
from dynaresize.policies.types import Allocation
from dynaresize.traces.io import Trace
from dynaresize.traces.phases import PipelineMode
from dynaresize.traces.workload import Workload

from ..analysis_context import AnalysisContext
from ..calibration.fit import CostFit
from ..calibration.resize_measure import critical_phase_spans, measured_critical_paths
from ..calibration.trace_costs import trace_model_inputs
from ..costs.resize import plan_resizes
from ..step_costs import compute_step_costs, steady_step_s_without_warmup
from .breakeven import BreakEven, BreakevenReport, analyse
from .colocated import fastest_start, modelled_stage_steps, with_start_fact


def measured_resize_cost_s(
    resizes: pd.DataFrame, steps: pd.DataFrame | None = None
) -> float | None:
    """Mean stall of the trace's own resizes: the gap the steps show around each resize where
    `steps` has it (what validation and the twin's plans count), else the span of its critical
    phases."""
    if len(resizes) == 0:
        return None
    spans = critical_phase_spans(resizes)
    if not spans:
        return None
    if steps is not None and len(steps):
        gaps = measured_critical_paths(steps)
        gaps = gaps[gaps["resize_id"].isin(list(spans))]
        if len(gaps):
            return float(gaps["critical_s"].mean())
    return float(np.mean(list(spans.values())))


def most_used_allocation(steps: pd.DataFrame) -> Allocation:
    """The split most of the trace's steps ran on (the one a user would move away from)."""
    pairs = steps[["train_gpus", "rollout_gpus"]].value_counts()
    train, rollout = pairs.index[0]
    return Allocation(train_gpus=int(train), rollout_gpus=int(rollout))


def breakeven_for_trace(
    trace: Trace,
    context: AnalysisContext,
    *,
    job_steps: int = 1000,
    fit_to_trace: bool = True,
    imbalance_threshold: float = 0.1,
    confidence: float = 0.9,
    num_resamples: int = 2000,
    seed: int = 0,
) -> tuple[BreakevenReport, CostFit | None]:
    """Break-even report of a trace in an analysis context.

    `job_steps` is the length of the job the advice projects its savings for (steps);
    `imbalance_threshold` the |imbalance| counted as imbalanced; `confidence`, `num_resamples`
    and `seed` set the bootstrap interval. Costs are fitted to the trace first unless
    `fit_to_trace` is False (costs given by the user). Returns the report, whose `assumed`
    lists the facts the context had to assume, and the `CostFit` (None when not fitted).
    """
    notes = list(context.notes) + list(trace.meta.notes)
    inputs = trace_model_inputs(trace, context, fit_to_trace=fit_to_trace)
    notes += inputs.inferred
    workload, costs, fit = inputs.workload, inputs.costs, inputs.fit
    assert isinstance(workload, Workload)  # held: the inputs were not asked to stream
    scenario = context.scenario
    step_costs = compute_step_costs(
        workload,
        cluster=scenario.cluster,
        model=scenario.model,
        costs=costs,
        pipeline=scenario.pipeline,
    )
    steady = steady_step_s_without_warmup(step_costs, costs, scenario.pipeline.mode)
    measured = measured_resize_cost_s(trace.resizes, trace.steps)
    if measured is not None:
        cost_s, source = measured, "mean measured stall of the trace's resizes"
    else:
        plan = plan_resizes(
            strategy=scenario.pipeline.resize_strategy,
            model=scenario.model,
            params=costs.resize,
            host_bandwidth_gbps=scenario.cluster.host_bandwidth_gbps,
            interconnect_bandwidth_gbps=scenario.cluster.weight_sync_bandwidth_gbps(),
        ).costlier
        cost_s = plan.critical_s
        source = (
            f"resize model, {scenario.pipeline.resize_strategy.value} critical path of the "
            "costlier direction"
        )
    measured_stages = trace.steps
    assumed = context.assumed
    recorded = ""
    if trace.meta.pipeline_mode is PipelineMode.COLOCATED:
        # No split was used: the what-ifs start from the given split, else the fastest one.
        current = context.initial
        if context.what_if_start_assumed:
            current = fastest_start(step_costs)
            assumed = with_start_fact(assumed, current)
        measured_stages = modelled_stage_steps(step_costs, current)
        recorded = _colocated_line(trace, steady, step_costs, current)
        notes.append(
            "colocated run: the imbalance runs are those of the twin's rollout and training "
            f"times on {current.label} (the run's own stage times, each on every GPU, show none)"
        )
    else:
        current = most_used_allocation(trace.steps)
    if current not in step_costs.candidates:
        raise ConfigError(
            f"the trace ran mostly on {current.label}, which is not among the candidate "
            f"splits ({', '.join(c.label for c in step_costs.candidates)})"
        )
    report = analyse(
        steps=measured_stages,
        steady_step_s=steady,
        candidates=step_costs.candidates,
        current=current,
        cost_s=cost_s,
        cost_source=source,
        total_gpus=scenario.cluster.total_gpus,
        job_steps=job_steps,
        imbalance_threshold=imbalance_threshold,
        confidence=confidence,
        num_resamples=num_resamples,
        seed=seed,
        notes=notes,
    )
    return replace(report, assumed=assumed, recorded=recorded, warnings=context.warnings), fit


def _colocated_line(trace: Trace, steady: np.ndarray, step_costs, start: Allocation) -> str:
    measured = float(trace.steps["step_s"].mean())
    modelled = float(steady[:, step_costs.index(start)].mean())
    gpus = trace.meta.num_gpus or int(trace.steps["train_gpus"].iloc[0])
    return (
        f"trace ran colocated on {gpus} GPUs (mean step {measured:.2f} s measured); "
        f"disaggregated {start.label}: {modelled:.2f} s per step modelled "
        f"({modelled / measured - 1:+.1%})"
    )


def _steps_text(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}"


def shown_transitions(report: BreakevenReport) -> list[BreakEven]:
    """Moves from the split the trace ran on, then one-notch moves between the others."""
    from_current = [t for t in report.transitions if t.from_allocation == report.current_allocation]
    from_current.sort(key=lambda t: (t.steps is None, t.steps or 0.0))

    def trainers(label: str) -> int:
        return int(label.split(":")[0])

    ranks = sorted({trainers(t.from_allocation) for t in report.transitions})
    notches = [
        t
        for t in report.transitions
        if t.from_allocation != report.current_allocation
        and abs(ranks.index(trainers(t.from_allocation)) - ranks.index(trainers(t.to_allocation)))
        == 1
    ]
    return from_current + notches


def report_lines(report: BreakevenReport) -> list[str]:
    """The report as plain text lines for a terminal."""
    pct = round(report.transitions[0].confidence * 100) if report.transitions else 90
    ran = report.recorded or f"trace ran mostly on {report.current_allocation}"
    lines = [
        f"resize critical path: {report.cost_s:.1f} s ({report.cost_source})",
        ran,
        "",
        f"{'move':<12}{'saving/step s':>15}{'break-even':>12}{f'{pct}% CI (steps)':>22}",
    ]
    for t in shown_transitions(report):
        ci = f"{_steps_text(t.ci_low_steps)} .. {_steps_text(t.ci_high_steps)}"
        lines.append(
            f"{t.from_allocation + ' -> ' + t.to_allocation:<12}"
            f"{t.mean_saving_per_step_s:>15.2f}{_steps_text(t.steps):>12}{ci:>22}"
        )
    runs = report.runs
    lines.append("")
    for name, lengths in (
        ("rollout-bound", runs.rollout_bound_steps),
        ("train-bound", runs.train_bound_steps),
    ):
        if len(lengths):
            lines.append(
                f"{name} runs (|imbalance| > {runs.threshold:g}): {len(lengths)}, median "
                f"{np.median(lengths):.0f} steps, p90 {np.percentile(lengths, 90):.0f}, "
                f"longest {lengths.max()}"
            )
        else:
            lines.append(f"{name} runs (|imbalance| > {runs.threshold:g}): none")
    advice = report.advice
    paying_steps = [
        t.steps
        for t in report.transitions
        if t.steps is not None and t.from_allocation == report.current_allocation
    ]
    if paying_steps:
        shortest = min(paying_steps)
        longer = int((runs.all_steps >= shortest).sum())
        lines.append(
            f"{longer} of {len(runs.all_steps)} imbalance runs last at least the shortest "
            f"break-even ({shortest:.1f} steps)"
        )

    def threshold_text(value: float | None) -> str:
        return "never resize this way on this trace" if value is None else f"{value:.2f}"

    lines += ["", "advice:"]
    if advice.keep_split_because is not None:
        lines += [
            f"  keep the split {report.current_allocation}: {advice.keep_split_because}; no "
            "resize settings are advised",
            f"  job of {advice.job_steps} steps: {advice.projected_job_hours_static:.2f} h static",
        ]
        return lines + [f"note: {n}" for n in report.notes]
    lines += [
        f"  best move from {report.current_allocation}: {advice.best_move}",
        f"  cooldown_steps: {advice.cooldown_steps}",
        f"  dwell_steps: {advice.dwell_steps}",
        f"  consecutive signals: {advice.consecutive_signals}",
        f"  up threshold (to Rollout): {threshold_text(advice.up_threshold)}",
        f"  down threshold (to Training): {threshold_text(advice.down_threshold)}",
        f"  job of {advice.job_steps} steps: {advice.projected_job_hours_static:.2f} h static; "
        f"saves {advice.projected_saving_hours:.2f} h = "
        f"{advice.projected_saving_gpu_hours:.1f} GPU-hours with the best move",
    ]
    lines += [f"note: {n}" for n in report.notes]
    return lines


def report_payload(report: BreakevenReport) -> dict:
    """The report as plain JSON data: assumed facts, every move, imbalance runs and advice."""
    runs = report.runs
    return {
        "assumed": [f.as_dict() for f in report.assumed],
        "warnings": list(report.warnings),
        "current_allocation": report.current_allocation,
        "resize_cost_s": report.cost_s,
        "resize_cost_source": report.cost_source,
        "transitions": [asdict(t) for t in report.transitions],
        "imbalance_runs": {
            "threshold": runs.threshold,
            "rollout_bound_steps": runs.rollout_bound_steps.tolist(),
            "train_bound_steps": runs.train_bound_steps.tolist(),
        },
        "advice": asdict(report.advice),
        "notes": report.notes,
    }


def write_report_json(report: BreakevenReport, path: str | os.PathLike[str]) -> None:
    """breakeven's `--out` file, written whole or not at all."""
    from dynaresize.traces.staged_dir import write_file_atomically

    text = json.dumps(report_payload(report), indent=2, allow_nan=False) + "\n"
    write_file_atomically(Path(path), lambda f: f.write(text))
