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

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear

from dynaresize.traces.io import Trace
from dynaresize.traces.phases import PhaseName, StrategyName

from ..costs import CostModels
from ..costs.memory import ModelConfig
from ..costs.resize import (
    Link,
    MoveDirection,
    MovedShare,
    PhaseCostParams,
    ResizeCostParams,
    StateMoved,
    changed_owner_fraction,
    gb_moved,
    plan_resize,
    runs_on_move,
    topological_order,
)
from .fit import FitError, FitInputs, StageFit
from .resize_measure import critical_phase_spans, measured_critical_paths

MIN_RECORDS_FOR_RATE = 3
"""Records a phase needs (over at least two sizes) before its per-GB rate is fitted."""
BYTES_MATCH_RTOL = 0.01
"""Recorded bytes within this of a state kind's bytes on every record identify the kind."""
ONE_DIRECTION_RATIO = 0.1
"""A phase whose median time on moves of one direction is below this share of its median on
the other runs on the other direction only."""


class ParamStatus(str, Enum):
    FITTED = "fitted"
    HELD = "held"
    """Not determined by the records: kept at the configured value."""
    LOWERED = "lowered"
    """Not determined, and the configured value alone exceeded the records: lowered to them."""
    NOT_APPLICABLE = "n/a"
    """The phase moves nothing, so it has no per-GB rate."""


@dataclass(frozen=True)
class PhaseFit:
    """The fit of one phase of one strategy."""

    strategy: StrategyName
    phase: PhaseName
    gb: np.ndarray
    """Gigabytes each record moved."""
    measured_s: np.ndarray
    predicted_s: np.ndarray
    base_s: float
    s_per_gb_measured: float
    """Seconds per GB on the traces' own links (the fitted slope)."""
    s_per_gb_param: float
    """The same rate at the reference bandwidth, as the twin's parameter stores it."""
    base_status: ParamStatus
    rate_status: ParamStatus
    base_stderr_s: float | None
    rate_stderr_s_per_gb: float | None
    reasons: list[str] = field(default_factory=list)
    held_because: str | None = None
    """Why the per-GB rate could not be determined, when it was held."""

    @property
    def residuals_s(self) -> np.ndarray:
        return self.measured_s - self.predicted_s

    @property
    def num_records(self) -> int:
        return len(self.measured_s)

    @property
    def r2(self) -> float | None:
        """Coefficient of determination of the two-parameter fit; None when only base_s was
        fitted (a constant explains none of the variance by construction)."""
        if self.rate_status is not ParamStatus.FITTED:
            return None
        total = float(np.sum((self.measured_s - self.measured_s.mean()) ** 2))
        if self.num_records < 2 or total <= 0:
            return None
        return 1.0 - float(np.sum(self.residuals_s**2)) / total

    @property
    def rmse_s(self) -> float:
        return float(np.sqrt(np.mean(self.residuals_s**2)))

    def describe(self) -> str:
        r2 = "n/a (base only)" if self.r2 is None else f"{self.r2:.3f}"
        base = _with_error(self.base_s, self.base_stderr_s, "s")
        rate = _with_error(self.s_per_gb_measured, self.rate_stderr_s_per_gb, "s/GB")
        sizes = ", ".join(f"{g:.3g}" for g in np.unique(np.round(self.gb, 3)))
        return (
            f"resize {self.strategy.value}.{self.phase.value}: "
            f"base_s {base} ({self.base_status.value}), "
            f"s_per_gb {rate} ({self.rate_status.value}); R²={r2}, RMSE {self.rmse_s:.3g} s, "
            f"max |residual| {np.max(np.abs(self.residuals_s)):.3g} s over {self.num_records} "
            f"records at {sizes} GB"
        )


def _with_error(value: float, stderr: float | None, unit: str) -> str:
    return f"{value:.4g} {unit}" if stderr is None else f"{value:.4g} ± {stderr:.2g} {unit}"


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
    fits = []
    for (strategy_value, phase_value), group in records.groupby(["strategy", "phase"], sort=True):
        strategy, phase = StrategyName(strategy_value), PhaseName(phase_value)
        if strategy is StrategyName.HOST_SYNC:
            notes.append(
                f"host_sync.{phase.value}: not fitted ({len(group)} records); the twin derives "
                "host_sync from the overlapped table, so fit runs of overlapped or stop_and_rebuild"
            )
            continue
        prior = updated[strategy].get(phase)
        if prior is None:
            notes.append(
                f"{strategy.value}.{phase.value} was measured ({len(group)} records) but the "
                "configured DAG has no such phase: not fitted"
            )
            continue
        # A phase that runs on moves of one direction only is fitted on those moves.
        gains = _gains_rollout(group)
        group = group[[runs_on_move(prior, gains_rollout=bool(g)) for g in gains]]
        if group.empty:
            continue
        prior = _measured_placement(records, strategy, phase, prior, updated[strategy], notes)
        prior = _recorded_accounting(group, prior, model, notes, f"{strategy.value}.{phase.value}")
        group, prior = _measured_direction(group, prior, notes, f"{strategy.value}.{phase.value}")
        gb, how = _gigabytes(group, prior, model)
        if how:
            notes.append(f"{strategy.value}.{phase.value}: {how}")
        scale = links.scale(prior.link, base)
        phase_fit = fit_one_phase(
            strategy, phase, gb, group["duration_s"].to_numpy(float), prior, scale
        )
        fits.append(phase_fit)
        updated[strategy][phase] = prior.model_copy(
            update={"base_s": phase_fit.base_s, "s_per_gb": phase_fit.s_per_gb_param}
        )
    _zero_phases_never_run(records, updated, notes)
    placed = base.model_copy(
        update={
            "stop_and_rebuild": updated[StrategyName.STOP_AND_REBUILD],
            "overlapped": updated[StrategyName.OVERLAPPED],
        }
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
    check = _critical_path_check(records, stalls, params, links, model)
    result = ResizeFit(params, fits, check, notes)
    if require_determined and result.undetermined():
        raise FitError(
            "the traces cannot determine: "
            + ", ".join(result.undetermined())
            + " (resizes of at least two model sizes are needed for a per-GB rate)"
        )
    return result


def _gpus(labels: pd.Series, side: int) -> np.ndarray:
    """GPUs of one side (0: training, 1: rollout) of each train:rollout label."""
    return labels.str.split(":").str[side].astype(int).to_numpy()


def _trainer_counts(records: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Trainer counts before and after each record's resize."""
    return _gpus(records["from_allocation"], 0), _gpus(records["to_allocation"], 0)


def _gains_rollout(records: pd.DataFrame) -> np.ndarray:
    """Whether each record's resize gives the rollout side more GPUs."""
    return _gpus(records["to_allocation"], 1) > _gpus(records["from_allocation"], 1)


def _recorded_accounting(
    group: pd.DataFrame,
    prior: PhaseCostParams,
    default_model: ModelConfig,
    notes: list[str],
    name: str,
) -> PhaseCostParams:
    """The state kind and share that the records' bytes are, where they identify one.

    The fit takes seconds per recorded GB; the twin predicts a move's GB from the model and the
    phase's `moves` and `share`. Where the bytes every record moved (those that moved any) are,
    within 1%, one kind of state of the trace's model, whole or its re-cut share for the record's
    trainer counts, the phase is set to that kind and share, so that the twin predicts the bytes
    the executor moves on every move. The configured kind and share win a tie.
    """
    moved = group[group["bytes_moved"] > 0]
    if moved.empty:
        return prior
    recorded = moved["bytes_moved"].to_numpy(np.float64) / 1e9
    before, after = _trainer_counts(moved)
    shares = {
        MovedShare.WHOLE: np.ones(len(moved)),
        MovedShare.CHANGED_OWNER: np.array(
            [changed_owner_fraction(int(b), int(a)) for b, a in zip(before, after, strict=True)]
        ),
    }
    models = [_of_size(default_model, s) for s in moved["model_params_b"].to_numpy(float)]
    kinds = [prior.moves, *(k for k in StateMoved if k not in (prior.moves, StateMoved.NONE))]
    matches = [
        (share, kind)
        for share in (prior.share, *(s for s in MovedShare if s is not prior.share))
        for kind in kinds
        if kind is not StateMoved.NONE
        and np.all(
            np.abs(np.array([gb_moved(kind, m) for m in models]) * shares[share] - recorded)
            <= BYTES_MATCH_RTOL * recorded
        )
    ]
    # Readings that give the same bytes on every move of this model are one reading.
    readings = {(share, round(gb_moved(kind, default_model), 9)) for share, kind in matches}
    if len(readings) > 1:
        listed = ", ".join(f"{share.value} {kind.value}" for share, kind in matches)
        notes.append(
            f"{name}: the recorded bytes fit several readings ({listed}), which other moves "
            f"would tell apart: the configured {prior.share.value} {prior.moves.value} is kept "
            "(records of moves that re-cut different shares of the state decide)"
        )
        return prior
    if not matches or (prior.share, prior.moves) in matches:
        return prior
    share, kind = matches[0]
    notes.append(
        f"{name}: every record moved the {share.value} share of the {kind.value} (configured: "
        f"{prior.share.value} {prior.moves.value}): adopted, so predictions move what the "
        "executor moves"
    )
    return prior.model_copy(update={"moves": kind, "share": share})


def _measured_direction(
    group: pd.DataFrame, prior: PhaseCostParams, notes: list[str], name: str
) -> tuple[pd.DataFrame, PhaseCostParams]:
    """Restrict a phase to the moves of one direction where the records show it costs next to
    nothing on the other (for example arriving trainers' set-up on moves towards rollout); the
    records of that direction then leave the fit."""
    gains = _gains_rollout(group)
    if gains.all() or not gains.any():
        return group, prior
    durations = group["duration_s"].to_numpy(float)
    towards_rollout, towards_training = np.median(durations[gains]), np.median(durations[~gains])
    larger = max(towards_rollout, towards_training)
    if larger <= 0 or min(towards_rollout, towards_training) >= ONE_DIRECTION_RATIO * larger:
        return group, prior
    direction = (
        MoveDirection.GAINING_ROLLOUT
        if towards_rollout > towards_training
        else MoveDirection.GAINING_TRAINING
    )
    keep = gains if direction is MoveDirection.GAINING_ROLLOUT else ~gains
    notes.append(
        f"{name}: median {towards_rollout:.3g} s on moves gaining rollout, "
        f"{towards_training:.3g} s on moves gaining training: runs on {direction.value} moves "
        f"only, fitted on their {int(keep.sum())} records"
    )
    return group[keep], prior.model_copy(update={"on_moves": direction})


def _placement(critical: bool) -> str:
    return "on the critical path" if critical else "in the background"


def _measured_placement(
    records: pd.DataFrame,
    strategy: StrategyName,
    phase: PhaseName,
    prior: PhaseCostParams,
    table: dict[PhaseName, PhaseCostParams],
    notes: list[str],
) -> PhaseCostParams:
    """The phase placed where every record of it ran, when that differs from the configured DAG.

    A phase that always ran on the critical path joins the critical chain after the phase that
    ended last before it started (the recorded order); one that always ran in the background
    leaves it. Mixed records, or an order that would form a cycle, keep the configured placement,
    and the notes say which.
    """
    mine = records[(records["strategy"] == strategy.value) & (records["phase"] == phase.value)]
    critical = mine["critical"].astype(bool)
    name = f"{strategy.value}.{phase.value}"
    all_critical, all_background = bool(critical.all()), bool((~critical).all())
    if (prior.critical and all_critical) or (not prior.critical and all_background):
        return prior
    if not (all_critical or all_background):
        notes.append(
            f"{name} ran partly on the critical path and partly in the background: the "
            f"configured placement ({_placement(prior.critical)}) is kept"
        )
        return prior
    if all_background:
        adopted = prior.model_copy(update={"critical": False})
        table[phase] = adopted
        rewired = []
        for other, spec in list(table.items()):
            if spec.critical and phase in spec.depends_on:
                # The critical path must not wait for a background phase: what waited for it
                # waits for what it waited for.
                deps = [d for d in spec.depends_on if d != phase]
                deps += [d for d in prior.depends_on if d not in deps]
                table[other] = spec.model_copy(update={"depends_on": deps})
                rewired.append(other.value)
        after = f"; {', '.join(rewired)} no longer wait for it" if rewired else ""
        notes.append(f"{name} ran in the background in every record: placed there{after}")
        return adopted
    critical_in_dag = {n for n, spec in table.items() if spec.critical}
    predecessor = _recorded_predecessor(records, strategy, phase, critical_in_dag)
    adopted = prior.model_copy(
        update={"critical": True, "depends_on": [predecessor] if predecessor else []}
    )
    trial = {**table, phase: adopted}
    try:
        topological_order(trial, strategy=strategy)
    except ValueError:
        notes.append(
            f"{name} ran on the critical path in every record, but after "
            f"{predecessor.value if predecessor else 'nothing'} it would form a cycle in the "
            "configured DAG: the configured placement is kept"
        )
        return prior
    after = f"after {predecessor.value}" if predecessor else "first"
    dropped = [d.value for d in prior.depends_on if d != predecessor]
    if dropped:
        after += f" (instead of after {', '.join(dropped)})"
    notes.append(f"{name} ran on the critical path in every record: placed there, {after}")
    table[phase] = adopted
    return adopted


def _recorded_predecessor(
    records: pd.DataFrame, strategy: StrategyName, phase: PhaseName, known: set[PhaseName]
) -> PhaseName | None:
    """The phase of `known` (the DAG's critical ones) that, among the records' critical phases,
    most often ended last before this one started."""
    votes: dict[PhaseName, int] = {}
    of_strategy = records[records["strategy"] == strategy.value]
    for _, resize in of_strategy.groupby(["trace_index", "resize_id"], sort=True):
        mine = resize[resize["phase"] == phase.value]
        if mine.empty:
            continue
        start_s = float(mine["start_s"].min())
        before = resize[
            resize["critical"].astype(bool)
            & (resize["phase"] != phase.value)
            & (resize["end_s"] <= start_s + 1e-6)
        ]
        before = before[before["phase"].map(lambda v: PhaseName(v) in known)]
        if len(before):
            last = PhaseName(before.sort_values("end_s")["phase"].iloc[-1])
            votes[last] = votes.get(last, 0) + 1
    return max(votes, key=votes.__getitem__) if votes else None


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


def _gigabytes(
    group: pd.DataFrame, prior: PhaseCostParams, default_model: ModelConfig
) -> tuple[np.ndarray, str]:
    recorded = group["bytes_moved"].to_numpy(np.float64) / 1e9
    if recorded.any() or prior.moves is StateMoved.NONE:
        return recorded, ""
    sizes = group["model_params_b"].to_numpy(float)
    gb = np.array([gb_moved(prior.moves, _of_size(default_model, s)) for s in sizes])
    if prior.share is MovedShare.CHANGED_OWNER:
        before, after = _trainer_counts(group)
        gb *= [changed_owner_fraction(int(b), int(a)) for b, a in zip(before, after, strict=True)]
    return gb, (
        f"no bytes recorded: the {prior.share.value} share of the {prior.moves.value} of each "
        "trace's model is assumed moved"
    )


def _of_size(model: ModelConfig, num_params_b: float) -> ModelConfig:
    """`model` with another parameter count (a trace's own model size)."""
    return ModelConfig(**{**model.model_dump(), "num_params_b": num_params_b})


def fit_one_phase(
    strategy: StrategyName,
    phase: PhaseName,
    gb: np.ndarray,
    measured_s: np.ndarray,
    prior: PhaseCostParams,
    scale: float,
) -> PhaseFit:
    """base_s and the per-GB slope by bounded least squares, or base_s alone when the slope is
    not determined (held at the prior, converted to this cluster's links)."""
    sizes = np.unique(np.round(gb, 6))
    reasons: list[str] = []
    why: str | None = None
    moves_nothing = prior.moves is StateMoved.NONE and not gb.any()
    if moves_nothing:
        rate_status = ParamStatus.NOT_APPLICABLE
    elif len(sizes) >= 2 and len(gb) >= MIN_RECORDS_FOR_RATE:
        rate_status = ParamStatus.FITTED
    else:
        rate_status = ParamStatus.HELD
        why = (
            f"every record moved the same {sizes[0]:.3g} GB"
            if len(sizes) < 2
            else f"only {len(gb)} records (need {MIN_RECORDS_FOR_RATE})"
        )
        reasons.append(
            f"s_per_gb cannot be determined ({why}): held at the configured "
            f"{prior.s_per_gb * scale:.4g} s/GB on these links"
        )
    if rate_status is ParamStatus.FITTED:
        design = np.column_stack([np.ones_like(gb), gb])
        solution = lsq_linear(design, measured_s, bounds=(0.0, np.inf))
        base_s, slope = (float(v) for v in solution.x)
    else:
        slope = 0.0 if moves_nothing else prior.s_per_gb * scale
        lowered = not moves_nothing and gb.sum() > 0
        lowered = lowered and float(np.mean(measured_s - slope * gb)) < 0
        if lowered:
            # The configured rate alone would exceed what was measured: the records bound the
            # rate from above, so it is lowered to the measured seconds per GB (base_s 0).
            slope = float(measured_s.sum() / gb.sum())
            rate_status = ParamStatus.LOWERED
            reasons[-1] = (
                f"s_per_gb cannot be determined ({why}), and the configured "
                f"{prior.s_per_gb * scale:.4g} s/GB alone would exceed the measured times: "
                f"lowered to the measured {slope:.4g} s/GB on these links (an upper bound; "
                "base_s 0)"
            )
        base_s = 0.0 if lowered else max(0.0, float(np.mean(measured_s - slope * gb)))
        design = np.ones((len(gb), 1))
    predicted = base_s + slope * gb
    stderrs = _standard_errors(design, measured_s - predicted)
    return PhaseFit(
        strategy=strategy,
        phase=phase,
        gb=gb,
        measured_s=measured_s,
        predicted_s=predicted,
        base_s=base_s,
        s_per_gb_measured=slope,
        s_per_gb_param=slope / scale if not moves_nothing else prior.s_per_gb,
        base_status=ParamStatus.FITTED,
        rate_status=rate_status,
        base_stderr_s=stderrs[0],
        rate_stderr_s_per_gb=stderrs[1] if rate_status is ParamStatus.FITTED else None,
        reasons=reasons,
        held_because=why,
    )


def _standard_errors(design: np.ndarray, residuals: np.ndarray) -> list[float | None]:
    """OLS standard errors of the coefficients; None where the records leave no dof."""
    n, p = design.shape
    if n <= p:
        return [None] * 2
    sigma2 = float(residuals @ residuals) / (n - p)
    try:
        cov = sigma2 * np.linalg.inv(design.T @ design)
    except np.linalg.LinAlgError:
        return [None] * 2
    errs = [float(np.sqrt(max(cov[i, i], 0.0))) for i in range(p)]
    return errs + [None] * (2 - p)


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
        before, after = _trainer_counts(resize.iloc[:1])
        plan = plan_resize(
            strategy=strategy,
            model=_of_size(model, size),
            params=params,
            host_bandwidth_gbps=links.host_bandwidth_gbps,
            interconnect_bandwidth_gbps=links.interconnect_bandwidth_gbps,
            starts_rollout_engines=bool(_gains_rollout(resize.iloc[:1])[0]),
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
        self.result = fit
        params = {}
        for p in fit.phases:
            key = f"{p.strategy.value}.{p.phase.value}"
            params[f"{key}.base_s"] = p.base_s
            params[f"{key}.s_per_gb"] = p.s_per_gb_param
        stage = StageFit(
            stage="resize",
            params=params,
            measured_s=np.concatenate([p.measured_s for p in fit.phases]),
            predicted_s=np.concatenate([p.predicted_s for p in fit.phases]),
            assumptions=[r for p in fit.phases for r in p.reasons] + fit.notes,
        )
        return costs.model_copy(update={"resize": fit.params}), stage


def has_resize_records(traces: Sequence[Trace]) -> bool:
    return any(len(t.resizes) for t in traces)


def _zero_phases_never_run(
    records: pd.DataFrame,
    updated: dict[StrategyName, dict[PhaseName, PhaseCostParams]],
    notes: list[str],
) -> None:
    """A phase that the measured strategy never ran costs nothing in the fitted model.

    The configured DAG of a strategy may name phases that the executor measured does not have
    (for example a separate weight sync after an overlapped resize); keeping their configured
    cost would add time the traces show is not spent.
    """
    for strategy_value, group in records.groupby("strategy", sort=True):
        strategy = StrategyName(strategy_value)
        if strategy is StrategyName.HOST_SYNC:
            continue
        seen = {PhaseName(v) for v in group["phase"].unique()}
        for phase, spec in updated[strategy].items():
            if phase not in seen and (spec.base_s > 0 or spec.s_per_gb > 0):
                updated[strategy][phase] = spec.model_copy(update={"base_s": 0.0, "s_per_gb": 0.0})
                notes.append(
                    f"{strategy.value}.{phase.value}: in the configured DAG but never run in the "
                    "traces: costs nothing in the fitted model"
                )
