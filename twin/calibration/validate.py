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

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dynaresize.config_io import ConfigError, load_yaml_mapping
from dynaresize.policies.types import Allocation, CostSource
from dynaresize.traces.io import Trace
from dynaresize.traces.phases import PipelineMode, StrategyName

from ..analysis_context import AnalysisContext, context_from_config
from ..config import ScenarioConfig, load_config
from ..costs.provenance import written_by_calibrate
from ..run_facts import RunFacts, refuse_assumed
from ..simulation import SimResult, build_context, simulate
from ..trace_source import open_trace, trace_notes
from .recorded_scenario import recorded_scenario, scenario_differences
from .resize_measure import critical_phase_spans, measured_critical_paths, step_boundaries
from .validation_report import ValidationReport, write_validation_outputs

__all__ = ["ValidationInputError", "run_validation", "validate_trace"]

EXECUTOR_SOURCE = "executor"
"""`RunMeta.source` of traces the live executor wrote."""


class ValidationInputError(ConfigError):
    """A trace or cost file that cannot be validated as asked (user input, exit code 2)."""


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
    schedule: list[dict[str, Any]] = [
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
    notes = list(context.notes) + trace_notes(trace)
    report = _compare(
        steps,
        predicted,
        recorded_phases=trace.resizes,
        strategy=strategy,
        mode=mode,
        cost_source=costs.cost_source,
        prelude_outside_step_zero=prelude_outside_step_zero,
        notes=notes,
    )
    return replace(report, assumed=context.assumed, warnings=context.warnings)


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


def run_validation(
    *,
    trace: str | os.PathLike[str],
    costs: str | os.PathLike[str],
    config: ScenarioConfig | str | os.PathLike[str] | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    lenient: bool = False,
    facts: RunFacts | None = None,
    strict: bool = False,
    force: bool = False,
) -> ValidationReport:
    """The `dynaresize validate` entry point: read, replay, compare, and write `out_dir`.

    The cost file must be one `dynaresize calibrate` wrote (every section unchanged). `config`
    is a scenario or the path of a scenario YAML file; without one, the run's own scenario file
    beside the trace is used, else one built from the trace's metadata, `facts` (the user's
    flags) and stated assumptions (twin.analysis_context); `strict` refuses any assumption. A
    config that differs from the run's own scenario, or a cost file calibrate did not write, is
    refused unless `force`, which notes it instead.
    """
    if not Path(costs).is_file():
        raise FileNotFoundError(2, "no such cost file", str(costs))
    forced: list[str] = []
    recorded = recorded_scenario(trace)
    if recorded is not None:
        own, own_path = recorded
        if config is None:
            config = own
            forced.append(f"scenario: the run's own {own_path}")
        else:
            given = config if isinstance(config, ScenarioConfig) else load_config(config)
            differences = scenario_differences(given, own)
            if differences and not force:
                raise ValidationInputError(
                    f"--config differs from the run's own scenario {own_path} in "
                    f"{'; '.join(differences)}: leave --config out to use the run's, or give "
                    "--force"
                )
            if differences:
                forced.append(
                    f"--force: --config differs from {own_path}: {'; '.join(differences)}"
                )
            config = given
    loaded = open_trace(trace, lenient=lenient, facts=facts)
    context = context_from_config(config, [loaded], costs_path=costs, facts=facts)
    if strict:
        refuse_assumed(context.assumed)
    problem = written_by_calibrate(load_yaml_mapping(os.fspath(costs)))
    if problem is not None and context.costs.cost_source is CostSource.CALIBRATED:
        message = f"{costs} is not a cost file dynaresize calibrate wrote: {problem}"
        if not force:
            raise ValidationInputError(
                f"{message}; validate compares calibrated costs with a run (write them with "
                "dynaresize calibrate, or give --force)"
            )
        forced.append(f"--force: {message}")
    report = validate_trace(loaded, context)
    report = replace(report, notes=forced + report.notes)
    if out_dir is not None:
        write_validation_outputs(
            report, Path(out_dir), title=f"{_run_name(Path(trace))}: twin against measured"
        )
    return report


def _run_name(trace: Path) -> str:
    """A trace directory is usually `<run>/trace`: name the run, not the folder."""
    resolved = trace.resolve()
    return resolved.parent.name if resolved.name == "trace" else resolved.name
