"""What a resize phase's records say beyond its timings.

The records can change a phase's model, not only its costs: the state kind and share that its
recorded bytes are (`recorded_accounting`), the direction of moves it runs on
(`measured_direction`), where in the strategy's DAG it ran (`measured_placement`), and phases of
the configured DAG that the measured strategy never ran (`zero_phases_never_run`). Each change
is written to the notes the calibration report prints.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dynaresize.traces.phases import PhaseName, StrategyName

from ..costs.memory import ModelConfig
from ..costs.resize import (
    MoveDirection,
    MovedShare,
    PhaseCostParams,
    StateMoved,
    changed_owner_fraction,
    gb_moved,
    topological_order,
)
from ..costs.resize_strategies import STRATEGY_COSTS

BYTES_MATCH_RTOL = 0.01
"""Recorded bytes within this of a state kind's bytes on every record identify the kind."""
ONE_DIRECTION_RATIO = 0.1
"""A phase whose median time on moves of one direction is below this share of its median on
the other runs on the other direction only."""


def _gpus(labels: pd.Series, side: int) -> np.ndarray:
    """GPUs of one side (0: training, 1: rollout) of each train:rollout label."""
    return labels.str.split(":").str[side].astype(int).to_numpy()


def trainer_counts(records: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Trainer counts before and after each record's resize."""
    return _gpus(records["from_allocation"], 0), _gpus(records["to_allocation"], 0)


def gains_rollout(records: pd.DataFrame) -> np.ndarray:
    """Whether each record's resize gives the rollout side more GPUs."""
    return _gpus(records["to_allocation"], 1) > _gpus(records["from_allocation"], 1)


def recorded_accounting(
    group: pd.DataFrame,
    prior: PhaseCostParams,
    default_model: ModelConfig,
    notes: list[str],
    name: str,
    *,
    traces_record_bytes: bool = False,
) -> PhaseCostParams:
    """The state kind and share that the records' bytes are, where they identify one.

    A phase that moved no bytes in any record, in traces that record the bytes of their other
    phases (`traces_record_bytes`: a zero there is a measured zero, not a missing count), moves
    nothing: the executor moves that state in other phases, so the twin must not price the
    configured kind's bytes here too (its link floor alone would put a whole model's transfer on
    the critical path).

    The fit takes seconds per recorded GB; the twin predicts a move's GB from the model and the
    phase's `moves` and `share`. Where the bytes every record moved (those that moved any) are,
    within 1%, one kind of state of the trace's model, whole or its re-cut share for the record's
    trainer counts, the phase is set to that kind and share, so that the twin predicts the bytes
    the executor moves on every move. The configured kind and share win a tie.
    """
    moved = group[group["bytes_moved"] > 0]
    if moved.empty:
        if not traces_record_bytes or prior.moves is StateMoved.NONE:
            return prior
        notes.append(
            f"{name}: none of its {len(group)} records moved bytes, while the same traces record "
            f"the bytes of other phases (configured: {prior.share.value} {prior.moves.value}): "
            "adopted as moving nothing"
        )
        return prior.model_copy(update={"moves": StateMoved.NONE})
    recorded = moved["bytes_moved"].to_numpy(np.float64) / 1e9
    before, after = trainer_counts(moved)
    shares = {
        MovedShare.WHOLE: np.ones(len(moved)),
        MovedShare.CHANGED_OWNER: np.array(
            [changed_owner_fraction(int(b), int(a)) for b, a in zip(before, after, strict=True)]
        ),
    }
    models = [of_size(default_model, s) for s in moved["model_params_b"].to_numpy(float)]
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


def measured_direction(
    group: pd.DataFrame, prior: PhaseCostParams, notes: list[str], name: str
) -> tuple[pd.DataFrame, PhaseCostParams]:
    """Restrict a phase to the moves of one direction where the records show it costs next to
    nothing on the other (for example arriving trainers' set-up on moves towards rollout); the
    records of that direction then leave the fit."""
    gains = gains_rollout(group)
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


def measured_placement(
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


def gigabytes_moved(
    group: pd.DataFrame, prior: PhaseCostParams, default_model: ModelConfig
) -> tuple[np.ndarray, str]:
    recorded = group["bytes_moved"].to_numpy(np.float64) / 1e9
    if recorded.any() or prior.moves is StateMoved.NONE:
        return recorded, ""
    sizes = group["model_params_b"].to_numpy(float)
    gb = np.array([gb_moved(prior.moves, of_size(default_model, s)) for s in sizes])
    if prior.share is MovedShare.CHANGED_OWNER:
        before, after = trainer_counts(group)
        gb *= [changed_owner_fraction(int(b), int(a)) for b, a in zip(before, after, strict=True)]
    return gb, (
        f"no bytes recorded: the {prior.share.value} share of the {prior.moves.value} of each "
        "trace's model is assumed moved"
    )


def of_size(model: ModelConfig, num_params_b: float) -> ModelConfig:
    """`model` with another parameter count (a trace's own model size)."""
    return ModelConfig(**{**model.model_dump(), "num_params_b": num_params_b})


def zero_phases_never_run(
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
        if not STRATEGY_COSTS[strategy].fitted:
            continue
        seen = {PhaseName(v) for v in group["phase"].unique()}
        for phase, spec in updated[strategy].items():
            costs_time = spec.base_s > 0 or spec.s_per_gb > 0 or spec.moves is not StateMoved.NONE
            if phase not in seen and costs_time:
                # Moving nothing too: a phase's bytes have a link floor even at no per-GB rate.
                updated[strategy][phase] = spec.model_copy(
                    update={"base_s": 0.0, "s_per_gb": 0.0, "moves": StateMoved.NONE}
                )
                notes.append(
                    f"{strategy.value}.{phase.value}: in the configured DAG but never run in the "
                    "traces: costs nothing in the fitted model"
                )
