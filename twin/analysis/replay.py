"""Replay: drive the twin with a recorded run's own workload and fitted costs.

`dynaresize run --mode replay --trace T [--config C]` answers "would dynamic resizing have paid
off on my job?" by comparing, on the very same per-step workload:

- the recorded run as measured (its wall time);
- the recorded run as the twin predicts it (the same allocations and resizes, replayed with a
  `scheduled` policy on costs fitted to the trace): how well the fitted model explains the trace;
- every static split;
- each configured policy;
- the offline optimum (twin.optimal), against which every row's regret is given.

Costs are fitted to the trace itself (twin.calibration) unless the user passes `--costs`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dynaresize.config_io import ConfigError
from dynaresize.policies.base import PolicyConfigBase
from dynaresize.policies.registry import parse_policy_config, parse_policy_spec
from dynaresize.policies.types import Allocation
from dynaresize.traces.importers.verl_switches import CONTROLLER as VERL_SEPARATE_ASYNC
from dynaresize.traces.io import Trace
from dynaresize.traces.phases import PipelineMode

from ..analysis_context import AnalysisContext, context_from_config
from ..block_costs import holds_samples
from ..calibration.resize_measure import step_boundaries
from ..calibration.trace_costs import trace_model_inputs
from ..comparison import run_names
from ..config import ScenarioConfig, load_config
from ..mechanisms import compare_mechanisms
from ..optimal import Regret, optimum_of_context, optimum_schedule_table
from ..run_facts import RunFacts, refuse_assumed
from ..simulation import SimResult, build_context, simulate
from ..trace_source import check_replayable, open_trace, trace_notes
from .colocated import (
    colocated_prediction,
    fastest_start,
    with_start_fact,
)
from .replay_outputs import decisions_table, plot_replay, write_replay_outputs
from .replay_result import (
    COLOCATED_MEASURED,
    COLOCATED_PREDICTED,
    OFFLINE_OPTIMUM,
    RECORDED_MEASURED,
    RECORDED_PREDICTED,
    TABLE_COLUMNS,
    ReplayResult,
)

__all__ = [
    "COLOCATED_MEASURED",
    "COLOCATED_PREDICTED",
    "OFFLINE_OPTIMUM",
    "RECORDED_MEASURED",
    "RECORDED_PREDICTED",
    "TABLE_COLUMNS",
    "ReplayResult",
    "decisions_table",
    "plot_replay",
    "replay_trace",
    "run_replay",
    "write_replay_outputs",
]

PolicySpec = str | Mapping[str, Any] | PolicyConfigBase
"""A policy as replay takes it: a config, a mapping of one, or the CLI form `KIND[:k=v,...]`."""

# --- building the comparison --------------------------------------------------------------


def recorded_schedule(steps: pd.DataFrame) -> tuple[Allocation, list[dict]]:
    """First allocation of a trace and its later changes as a `scheduled` policy's entries."""
    train = steps["train_gpus"].to_numpy(np.int64)
    rollout = steps["rollout_gpus"].to_numpy(np.int64)
    first = Allocation(train_gpus=int(train[0]), rollout_gpus=int(rollout[0]))
    changes = np.flatnonzero((train[1:] != train[:-1]) | (rollout[1:] != rollout[:-1])) + 1
    schedule = [
        {"step": int(steps["step"].iloc[k - 1]), "allocation": f"{train[k]}:{rollout[k]}"}
        for k in changes
    ]
    return first, schedule


def measured_total_s(steps: pd.DataFrame) -> float:
    """Wall time of the recorded run: from its first step's start to its last step's end."""
    return float(steps["end_s"].max() - steps["start_s"].min())


def as_policy_configs(policies: Sequence[PolicySpec]) -> list[PolicyConfigBase]:
    """Policy configs from configs, mappings or CLI specs (`KIND[:key=value,...]`)."""
    return [
        parse_policy_spec(p) if isinstance(p, str) else parse_policy_config(p) for p in policies
    ]


def replay_trace(
    trace: Trace,
    context: AnalysisContext,
    *,
    policies: Sequence[PolicySpec] | None = None,
    fit_to_trace: bool = True,
    mechanisms: bool = False,
) -> ReplayResult:
    """Compare the recorded run with its twin replay, static splits, policies and the optimum
    (and, with `mechanisms`, the ways of moving GPUs side by side: twin.mechanisms)."""
    steps = trace.steps
    if len(steps) == 0:
        raise ConfigError("the trace has no steps to replay")
    notes = list(context.notes) + trace_notes(trace)
    colocated = is_colocated(trace)
    first, schedule = recorded_schedule(steps)
    if colocated:
        first, schedule = context.initial, []
    candidates = {c.label for c in context.candidates}
    used = {first.label} | {entry["allocation"] for entry in schedule}
    missing = sorted(used - candidates)
    if missing:
        raise ConfigError(
            f"the trace ran on {', '.join(missing)}, not among the candidate splits "
            f"({', '.join(sorted(candidates))}): add them to cluster.candidate_allocations"
        )
    scenario = context.scenario_for_steps(len(steps))
    held_for = _held_for(scenario, mechanisms=mechanisms)
    if held_for:
        check_replayable(trace, held=True, why=f": {held_for} needs every sample at once")
    inputs = trace_model_inputs(trace, context, fit_to_trace=fit_to_trace, streamed=not held_for)
    notes += inputs.inferred
    workload, costs, fit = inputs.workload, inputs.costs, inputs.fit
    if fit is not None:
        notes += fit.notes
    cluster = scenario.cluster.model_copy(update={"initial_allocation": first})
    scenario = scenario.model_copy(update={"cluster": cluster, "costs": costs})
    sim_context = build_context(scenario, workload=workload, costs=costs)
    assumed = context.assumed
    if colocated and context.what_if_start_assumed:
        first = fastest_start(sim_context.step_costs)
        cluster = scenario.cluster.model_copy(update={"initial_allocation": first})
        scenario = scenario.model_copy(update={"cluster": cluster})
        sim_context = build_context(scenario, workload=workload, costs=costs)
        assumed = with_start_fact(assumed, first)
    if colocated:
        notes.append(
            f"colocated run on {trace.meta.num_gpus or int(steps['train_gpus'].iloc[0])} GPUs: "
            "compared with disaggregated splits, held or resized, starting from "
            f"{first.label}; the offline optimum is over disaggregated schedules, so the "
            "colocated rows have no regret against it"
        )
        predicted_steps = colocated_prediction(steps, workload, scenario)
        predicted_total_s = float(predicted_steps["step_s"].sum())
        predicted_row_resizes, predicted_row_thrash = 0, 0
    elif not schedule:
        # A run that never resized is a static split, whose steps the pipeline follows exactly
        # (`step_costs.static_step_times`): read them off the matrix, no simulation needed.
        column = sim_context.step_costs.step_s[:, sim_context.step_costs.index(first)]
        predicted_steps = pd.DataFrame({"step": steps["step"].to_numpy(), "step_s": column})
        predicted_total_s = float(column.sum())
        predicted_row_resizes, predicted_row_thrash = 0, 0
    else:
        run = simulate(
            scenario,
            {"kind": "scheduled", "schedule": schedule},
            context=sim_context,
            phase_rows=False,
        )
        predicted_steps = run.steps
        predicted_total_s = run.summary.total_s  # resize stalls included
        predicted_row_resizes = run.summary.num_resizes
        predicted_row_thrash = run.summary.thrash_count
        del run  # its decisions and resizes: no output reads them
    if policies is None:
        policies = list(scenario.policies) if context.from_config else []
        if not policies and _recorded_controller(trace) == VERL_SEPARATE_ASYNC:
            policies = [{"kind": "hysteresis"}, {"kind": "verl_switch"}]
            notes.append(
                "no policy given: replayed the hysteresis policy and verl_switch (veRL's "
                "separate-async rule, which recorded this run's decisions) with their defaults"
            )
        elif not policies:
            policies = [{"kind": "hysteresis"}]
            notes.append("no policy given: replayed the hysteresis policy with its defaults")
    configs = as_policy_configs(policies)
    # Every phase of the first policy's resizes (its Chrome trace shows them); one row per
    # resize of the others, which is what their rows of the table read: a policy that resizes
    # at nearly every step of a million would otherwise hold eight million phase rows.
    names = run_names([c.kind for c in configs])
    results: dict[str, SimResult] = {
        name: simulate(scenario, config, context=sim_context, phase_rows=k == 0)
        for k, (name, config) in enumerate(zip(names, configs, strict=True))
    }

    optimum = optimum_of_context(sim_context)
    measured_s, outside_s = measured_total_s(steps), between_steps_s(steps)
    if outside_s > 0:
        measured_s -= outside_s
        notes.append(
            f"{outside_s:.1f} s between steps outside any resize (validation, checkpoints) "
            "left out of the measured total: no compared run models them"
        )
    recorded_resizes = len(schedule)
    if not schedule and len(trace.resizes):
        recorded_resizes = int(trace.resizes["resize_id"].nunique())
        notes.append(
            f"the recorded run's controller switched GPUs {recorded_resizes} times within its "
            f"steps ({_switch_seconds(trace):.1f} s measured); the twin's rows move GPUs "
            "between whole steps"
        )
    measured_name, predicted_name = (
        (COLOCATED_MEASURED, COLOCATED_PREDICTED)
        if colocated
        else (RECORDED_MEASURED, RECORDED_PREDICTED)
    )
    entries = [
        (measured_name, "recorded", measured_s, recorded_resizes, 0),
        (
            predicted_name,
            "recorded",
            predicted_total_s,
            predicted_row_resizes,
            predicted_row_thrash,
        ),
        *(
            (f"static {label}", "static", total, 0, 0)
            for label, total in sim_context.baselines.totals_s.items()
        ),
        *(
            (name, "policy", r.summary.total_s, r.summary.num_resizes, r.summary.thrash_count)
            for name, r in results.items()
        ),
        (OFFLINE_OPTIMUM, "optimum", optimum.total_s, optimum.num_resizes, 0),
    ]
    rows = [
        _row(
            *entry,
            optimum_s=optimum.total_s,
            measured_s=measured_s,
            has_regret=not (colocated and entry[1] == "recorded"),
        )
        for entry in entries
    ]
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    if fit is not None:
        notes = [f"fit: {line}" for line in fit.quality_lines()] + notes
    result = ReplayResult(
        table=table,
        measured_steps=steps,
        predicted_steps=predicted_steps,
        predicted_total_s=predicted_total_s,
        policies=results,
        optimum=optimum,
        fit=fit,
        notes=notes,
        assumed=assumed,
        warnings=context.warnings,
        recorded_decisions=trace.decisions,
        optimal_schedule=optimum_schedule_table(sim_context, optimum, steps["step"].to_numpy()),
        mechanisms=compare_mechanisms(scenario, sim_context) if mechanisms else None,
    )
    result.notes.insert(
        0,
        f"twin vs measured, recorded run: total {result.prediction_error:+.1%}, step times off "
        f"by {result.step_time_mape:.1%} on average",
    )
    return result


def _held_for(scenario: ScenarioConfig, *, mechanisms: bool) -> str:
    """What of this replay reads every sample's lengths at once ("" if nothing does: the
    trace's samples are then read a block of steps at a time where they can be)."""
    if mechanisms:
        return "--mechanisms (lending goes sample by sample)"
    if holds_samples(scenario):
        return "a pipeline that lends or keeps partial rollouts (it goes sample by sample)"
    return ""


def is_colocated(trace: Trace) -> bool:
    """A hybrid-engine run: every GPU took both roles in turn (no split to replay)."""
    return trace.meta.pipeline_mode is PipelineMode.COLOCATED


def _recorded_controller(trace: Trace) -> str | None:
    """The policy that recorded the trace's decisions, if it has any."""
    decisions = trace.decisions
    return str(decisions["policy"].iloc[0]) if len(decisions) else None


def between_steps_s(steps: pd.DataFrame) -> float:
    """Seconds between steps at boundaries without a resize (validation, checkpoints)."""
    if len(steps) < 2:
        return 0.0
    boundaries = step_boundaries(steps)
    gaps = boundaries.loc[boundaries["resize_id"].isna(), "gap_s"].to_numpy(np.float64)
    return float(np.clip(gaps, 0.0, None).sum())


def _switch_seconds(trace: Trace) -> float:
    resizes = trace.resizes
    return float((resizes["end_s"] - resizes["start_s"]).sum())


def _row(
    name: str,
    kind: str,
    total_s: float,
    num_resizes: int,
    thrash: int,
    *,
    optimum_s: float,
    measured_s: float,
    has_regret: bool = True,
) -> dict:
    """One row; `has_regret` False for a run that is no schedule of the optimum's (colocated),
    whose regret is then NaN rather than a figure that could be negative."""
    regret = Regret(policy_total_s=total_s, optimal_total_s=optimum_s)
    nan = float("nan")
    return {
        "name": name,
        "kind": kind,
        "total_s": total_s,
        "total_h": total_s / 3600,
        "speedup_vs_recorded": measured_s / total_s if total_s > 0 else nan,
        "regret_s": regret.regret_s if has_regret else nan,
        "regret_pct": 100 * regret.regret_fraction if has_regret else nan,
        "num_resizes": num_resizes,
        "thrash_count": thrash,
    }


def run_replay(
    *,
    trace: str | os.PathLike[str],
    config: ScenarioConfig | str | os.PathLike[str] | None = None,
    policies: Sequence[PolicySpec] | None = None,
    costs: str | os.PathLike[str] | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    lenient: bool = False,
    facts: RunFacts | None = None,
    strict: bool = False,
    config_name: str | os.PathLike[str] | None = None,
    mechanisms: bool = False,
) -> ReplayResult:
    """The `run --mode replay` entry point: read, fit, replay, compare, and write `out_dir`.

    `config` is a scenario or the path of a scenario YAML file; without one, the scenario is
    built from the trace's metadata, `facts` (the user's flags) and stated assumptions
    (twin.analysis_context); `strict` refuses any assumption. `policies` are policy configs,
    mappings or CLI specs (`KIND[:key=value,...]`); None takes the config's policies (or
    hysteresis). `costs` replaces fitting with the given parameters. `config_name` names the
    config in messages (default: `config` when it is a path).
    """
    scenario = load_config(config) if isinstance(config, str | os.PathLike) else config
    split = scenario.cluster.initial_allocation if scenario is not None else None
    named = config if isinstance(config, str | os.PathLike) else config_name
    loaded = open_trace(
        trace,
        lenient=lenient,
        facts=facts,
        config_split=split,
        config_name=named,
        samples_as_lengths=True,
    )
    context = context_from_config(scenario, [loaded], costs_path=costs, facts=facts)
    if strict:
        refuse_assumed(context.assumed)
    result = replay_trace(
        loaded, context, policies=policies, fit_to_trace=costs is None, mechanisms=mechanisms
    )
    if out_dir is not None:
        write_replay_outputs(
            result,
            Path(out_dir),
            title=f"replay of {Path(trace).name}",
            scenario=context.scenario_for_steps(len(loaded.steps)),
        )
    return result
