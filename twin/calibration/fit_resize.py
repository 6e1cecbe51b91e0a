"""Resize-phase calibration: each phase of each strategy as `base_s + s_per_gb * GB moved`.

The twin models a resize as a DAG of phases (twin/costs/resize.py), each lasting
`base_s + s_per_gb * gb * bandwidth_scale`. Measured resizes (ResizePhaseRecord rows of one or
more traces, e.g. live runs of different model sizes) give, per (strategy, phase), pairs of
gigabytes moved and seconds taken; a bounded linear least-squares fit (scipy) recovers the two
parameters, with R², residuals and standard errors.

What the records cannot determine is not guessed. A per-GB rate needs at least two different
sizes moved (and three records); with one size the rate is held at its configured value and only
`base_s` is fitted, and the report says so; where the configured rate alone would exceed the
measured times, the records bound it from above and it is lowered to their seconds per GB.
`require_determined=True` turns every such case into a FitError instead. Phases never measured
keep their configured values; measured phases that the configured DAG does not have are
reported, not added (their dependencies are unknown).

Gigabytes come from each record's `bytes_moved`; where a phase recorded none although the model
says it moves state, the state size of the trace's model is used, and the report says that too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dynaresize.traces.io import Trace
from dynaresize.traces.phases import PhaseName, StrategyName

from ..costs import CostModels
from ..costs.memory import ModelConfig
from ..costs.resize import (
    Link,
    PhaseCostParams,
    ResizeCostParams,
    plan_resize,
    runs_on_move,
)
from ..costs.resize_strategies import STRATEGY_COSTS
from .fit_first_step import fit_first_train_step
from .fit_paths import fit_path_bandwidths, same_node_durations, transfer_records
from .phase_fit import ParamStatus, PhaseFit, fit_one_phase
from .resize_measure import critical_phase_spans, measured_critical_paths
from .resize_readings import (
    gains_rollout,
    gigabytes_moved,
    measured_direction,
    measured_placement,
    of_size,
    recorded_accounting,
    trainer_counts,
    zero_phases_never_run,
)
from .stage_fit import FitError, FitInputs, StageFit


@dataclass(frozen=True)
class CriticalPathCheck:
    """Each measured resize's critical path against the fitted model's prediction."""

    measured_s: np.ndarray
    predicted_s: np.ndarray

    @property
    def abs_pct_error(self) -> np.ndarray:
        return np.abs(self.predicted_s - self.measured_s) / np.maximum(self.measured_s, 1e-9) * 100


@dataclass(frozen=True)
class ResizeFit:
    params: ResizeCostParams
    phases: list[PhaseFit]
    critical_path: CriticalPathCheck | None
    notes: list[str]

    def undetermined(self) -> list[str]:
        """Parameters the records could not determine."""
        return [
            f"{p.strategy.value}.{p.phase.value}.s_per_gb ({p.held_because})"
            for p in self.phases
            if p.rate_status in (ParamStatus.HELD, ParamStatus.LOWERED)
        ]

    def report_lines(self) -> list[str]:
        lines = [p.describe() for p in self.phases]
        lines += [
            f"resize: {p.strategy.value}.{p.phase.value}: {r}"
            for p in self.phases
            for r in p.reasons
        ]
        if self.critical_path is not None and len(self.critical_path.measured_s):
            err = self.critical_path.abs_pct_error
            lines.append(
                f"resize critical path: median |error| {np.median(err):.2f}%, max "
                f"{err.max():.2f}% over {len(err)} measured resizes (fitted model vs measured)"
            )
        return lines + [f"resize: {n}" for n in self.notes]


@dataclass(frozen=True)
class _Links:
    host_bandwidth_gbps: float
    interconnect_bandwidth_gbps: float

    def scale(self, link: Link, params: ResizeCostParams) -> float:
        """Factor the twin applies to a phase's s_per_gb on this cluster's links."""
        return params.bandwidth_scale(
            link,
            host_bandwidth_gbps=self.host_bandwidth_gbps,
            interconnect_bandwidth_gbps=self.interconnect_bandwidth_gbps,
        )


def resize_records(traces: Sequence[Trace], default_model: ModelConfig) -> pd.DataFrame:
    """All resize-phase rows of all traces, with duration, trace index and the trace's model."""
    frames = []
    for i, trace in enumerate(traces):
        if len(trace.resizes) == 0:
            continue
        size = trace.meta.model_params_b
        frames.append(
            trace.resizes.assign(
                trace_index=i,
                duration_s=trace.resizes["end_s"] - trace.resizes["start_s"],
                model_params_b=size if size else default_model.num_params_b,
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def fit_resize_phases(
    traces: Sequence[Trace],
    *,
    base: ResizeCostParams | None = None,
    model: ModelConfig,
    host_bandwidth_gbps: float,
    interconnect_bandwidth_gbps: float,
    require_determined: bool = False,
) -> ResizeFit:
    """Fit every measured phase of every strategy; see the module docstring for the rules."""
    base = base or ResizeCostParams()
    links = _Links(host_bandwidth_gbps, interconnect_bandwidth_gbps)
    records = resize_records(traces, model)
    if records.empty:
        raise FitError("no resize records in the traces: resize phases cannot be fitted")
    notes: list[str] = []
    if not any(t.meta.model_params_b for t in traces):
        notes.append(f"no trace states its model size: {model.num_params_b:g}B assumed")
    updated = {s: dict(base.phases(s)) for s in StrategyName}
    paths = fit_path_bandwidths(traces, base=base.path_bandwidths)
    transfers = transfer_records(traces) if paths is not None else None
    fits = []
    # traces whose records count bytes: there a phase's 0 is a measured zero (recorded_accounting)
    counting_bytes = set(records.loc[records["bytes_moved"] > 0, "trace_index"])
    for (strategy_value, phase_value), group in records.groupby(["strategy", "phase"], sort=True):
        strategy, phase = StrategyName(strategy_value), PhaseName(phase_value)
        costs = STRATEGY_COSTS[strategy]
        if not costs.fitted:
            fitted = " or ".join(sorted(s.value for s, c in STRATEGY_COSTS.items() if c.fitted))
            notes.append(
                f"{strategy.value}.{phase.value}: not fitted ({len(group)} records); the twin "
                f"derives {strategy.value} from the {costs.table} table, so fit runs of {fitted}"
            )
            continue
        prior = updated[strategy].get(phase)
        if prior is None:
            # A phase the configured DAG lacks (an optional one, such as rollout_release): it
            # joins the DAG where its records place it and is fitted like the others.
            prior = PhaseCostParams(base_s=0.0, critical=False)
            updated[strategy][phase] = prior
            notes.append(
                f"{strategy.value}.{phase.value} was measured ({len(group)} records) but the "
                "configured DAG has no such phase: added where its records place it"
            )
        # A phase that runs on moves of one direction only is fitted on those moves.
        gains = gains_rollout(group)
        group = group[[runs_on_move(prior, gains_rollout=bool(g)) for g in gains]]
        if group.empty:
            continue
        prior = measured_placement(records, strategy, phase, prior, updated[strategy], notes)
        prior = recorded_accounting(
            group,
            prior,
            model,
            notes,
            f"{strategy.value}.{phase.value}",
            traces_record_bytes=not counting_bytes.isdisjoint(group["trace_index"]),
        )
        group, prior = measured_direction(group, prior, notes, f"{strategy.value}.{phase.value}")
        gb, how = gigabytes_moved(group, prior, model)
        if how:
            notes.append(f"{strategy.value}.{phase.value}: {how}")
        scale = links.scale(prior.link, base)
        durations = group["duration_s"].to_numpy(float)
        if paths is not None and transfers is not None:  # at the same-node path's rate
            durations = same_node_durations(group, transfers, paths.bandwidths)
        before, after = trainer_counts(group)
        phase_fit = fit_one_phase(
            strategy, phase, gb, durations, prior, scale, moved_gpus=np.abs(after - before)
        )
        fits.append(phase_fit)
        updated[strategy][phase] = prior.model_copy(
            update={
                "base_s": phase_fit.base_s,
                "s_per_gb": phase_fit.s_per_gb_param,
                "s_per_moved_gpu": phase_fit.s_per_moved_gpu,
            }
        )
    zero_phases_never_run(records, updated, notes)
    placed = base.model_copy(
        update={c.table: updated[s] for s, c in STRATEGY_COSTS.items() if c.fitted}
    )
    stalls = resize_stalls(traces, placed)
    coordination_s = base.coordination_s
    if len(stalls):
        coordination_s = max(0.0, float(np.median(stalls["outside_phases_s"])))
        notes.append(
            f"coordination (stall outside the phases the model places on the critical path, as "
            f"the steps show it): {coordination_s:.3g} s per resize, the median of "
            f"{len(stalls)} resizes"
        )
    params = placed.model_copy(update={"coordination_s": coordination_s})
    if paths is not None:  # per-path bandwidths, where the traces record their transfers
        params = params.model_copy(update={"path_bandwidths": paths.bandwidths})
        notes += paths.notes
    check = _critical_path_check(records, stalls, params, links, model)
    result = ResizeFit(params, fits, check, notes)
    if require_determined and result.undetermined():
        raise FitError(
            "the traces cannot determine: "
            + ", ".join(result.undetermined())
            + " (resizes of at least two model sizes are needed for a per-GB rate)"
        )
    return result


def resize_stalls(traces: Sequence[Trace], placed: ResizeCostParams | None = None) -> pd.DataFrame:
    """Per measured resize: the stall the steps show, the span of its recorded critical phases,
    and the difference (time outside every phase).

    With `placed`, only records of phases that its DAG puts on the critical path count: a phase
    the model places in the background may still hold the pipeline for a moment (a deferred move
    being set up), and that moment then counts as stall outside the modelled phases, where the
    twin charges it, instead of being lost.
    """
    rows = []
    for i, trace in enumerate(traces):
        if len(trace.resizes) == 0 or len(trace.steps) == 0:
            continue
        resizes = trace.resizes
        if placed is not None:
            resizes = resizes[[_placed_critical(placed, r) for r in resizes.itertuples()]]
        spans = critical_phase_spans(resizes)
        for gap in measured_critical_paths(trace.steps).itertuples(index=False):
            if gap.resize_id in spans:
                rows.append(
                    {
                        "trace_index": i,
                        "resize_id": gap.resize_id,
                        "stall_s": gap.critical_s,
                        "phase_span_s": spans[gap.resize_id],
                        "outside_phases_s": gap.critical_s - spans[gap.resize_id],
                    }
                )
    columns = ["trace_index", "resize_id", "stall_s", "phase_span_s", "outside_phases_s"]
    return pd.DataFrame(rows, columns=columns)


def _placed_critical(params: ResizeCostParams, record) -> bool:
    spec = params.phases(StrategyName(record.strategy)).get(PhaseName(record.phase))
    return spec is None or spec.critical


def _critical_path_check(
    records: pd.DataFrame,
    stalls: pd.DataFrame,
    params: ResizeCostParams,
    links: _Links,
    model: ModelConfig,
) -> CriticalPathCheck | None:
    """Measured critical path of each resize against the fitted plan for that trace's model and
    the configured links. Measured is the stall the steps show where the trace has them (what
    validation compares), else the span of the recorded critical phases."""
    measured, predicted = [], []
    stall_of = {
        (int(r.trace_index), int(r.resize_id)): float(r.stall_s)
        for r in stalls.itertuples(index=False)
    }
    for (trace_index, resize_id), resize in records.groupby(
        ["trace_index", "resize_id"], sort=True
    ):
        span_s = critical_phase_spans(resize).get(int(resize_id))
        if span_s is None:
            continue
        strategy = StrategyName(resize["strategy"].iloc[0])
        size = float(resize["model_params_b"].iloc[0])
        before, after = trainer_counts(resize.iloc[:1])
        plan = plan_resize(
            strategy=strategy,
            model=of_size(model, size),
            params=params,
            host_bandwidth_gbps=links.host_bandwidth_gbps,
            interconnect_bandwidth_gbps=links.interconnect_bandwidth_gbps,
            starts_rollout_engines=bool(gains_rollout(resize.iloc[:1])[0]),
            trainers_before=int(before[0]),
            trainers_after=int(after[0]),
        )
        measured.append(stall_of.get((int(trace_index), int(resize_id)), span_s))
        predicted.append(plan.critical_s)
    if not measured:
        return None
    return CriticalPathCheck(np.array(measured), np.array(predicted))


class ResizeStageFitter:
    """Plugs resize-phase fitting into `twin.calibration.fit.fit_costs(extra_fitters=...)`.

    `fit_costs` hands fitters its merged steps only, so this one holds the traces itself; the
    detailed per-phase result is kept in `.result` for the report.
    """

    def __init__(
        self,
        traces: Sequence[Trace],
        *,
        host_bandwidth_gbps: float,
        interconnect_bandwidth_gbps: float,
        require_determined: bool = False,
    ) -> None:
        self.traces = list(traces)
        self.host_bandwidth_gbps = host_bandwidth_gbps
        self.interconnect_bandwidth_gbps = interconnect_bandwidth_gbps
        self.require_determined = require_determined
        self.result: ResizeFit | None = None

    def __call__(self, inputs: FitInputs, costs: CostModels) -> tuple[CostModels, StageFit]:
        fit = fit_resize_phases(
            self.traces,
            base=costs.resize,
            model=inputs.model,
            host_bandwidth_gbps=self.host_bandwidth_gbps,
            interconnect_bandwidth_gbps=self.interconnect_bandwidth_gbps,
            require_determined=self.require_determined,
        )
        first = fit_first_train_step(inputs.steps, model=inputs.model, train=costs.train)
        fit = dataclasses.replace(
            fit,
            params=fit.params.model_copy(
                update={
                    "first_train_step_s": first.general_s,
                    "first_train_step_s_by_trainers": first.by_trainers,
                }
            ),
            notes=[*fit.notes, first.describe()],
        )
        self.result = fit
        params = {"first_train_step_s": first.general_s}
        params |= {f"first_train_step_s.{n}": s for n, s in first.by_trainers.items()}
        for p in fit.phases:
            key = f"{p.strategy.value}.{p.phase.value}"
            params[f"{key}.base_s"] = p.base_s
            params[f"{key}.s_per_gb"] = p.s_per_gb_param
            if p.moved_status is ParamStatus.FITTED:
                params[f"{key}.s_per_moved_gpu"] = p.s_per_moved_gpu
        stage = StageFit(
            stage="resize",
            params=params,
            measured_s=np.concatenate([p.measured_s for p in fit.phases]),
            predicted_s=np.concatenate([p.predicted_s for p in fit.phases]),
            # The per-phase reasons and notes are in `self.result.report_lines()`, which the
            # calibration report prints once; repeating them here printed them twice.
            assumptions=[],
        )
        return costs.model_copy(update={"resize": fit.params}), stage


def has_resize_records(traces: Sequence[Trace]) -> bool:
    return any(len(t.resizes) for t in traces)
