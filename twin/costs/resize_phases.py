"""The phases a resize is made of: what each moves, over which link, on which moves, and when.

A phase's parameters (`PhaseCostParams`) are what a user sets in a costs file and what
`dynaresize calibrate` fits, so they live apart from the planning in `resize`, which only reads
them. The default tables reproduce the paper's breakdown for Qwen3-8B on 8 H20s
(../shared/reference/facts.md, Exp#2): 254.8 s for stop-and-rebuild and 187.2 s critical for the
overlapped strategy, whose deferred optimizer restore and communicator prewarm run in the
background. The figure prints four values per strategy whose assignment to phases is not certain
and which do not add up exactly to the stated totals; the defaults keep the four groups and hit
the totals. The gigabytes a phase moves (`gb_moved`) and the share of a re-cut state that
changes owner (`changed_owner_fraction`) are the phase's own arithmetic, so they are here too.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dynaresize.traces.phases import PhaseName

from .memory import GB, ModelConfig


class StateMoved(str, Enum):
    """Which state a phase moves; its bytes come from the model config."""

    NONE = "none"
    WEIGHTS = "weights"
    OPTIMIZER_STATE = "optimizer_state"
    TRAIN_STATE = "train_state"
    MASTER_WEIGHTS = "master_weights"
    """The fp32 master copy alone (what a ZeRO-1 re-cut of the weights moves)."""
    OPTIMIZER_MOMENTS = "optimizer_moments"
    """The optimizer moments alone (what a re-cut of the optimizer state moves after it)."""


class MovedShare(str, Enum):
    """How much of the state a phase moves on a given move."""

    WHOLE = "whole"
    """All of it, whatever the move (a checkpoint, a broadcast)."""
    CHANGED_OWNER = "changed_owner"
    """Only the part of the trainers' slices whose owner changes when equal contiguous slices
    are re-cut from the old trainer count to the new one (the trainers that stay keep their rank
    order); see `changed_owner_fraction`."""


class MoveDirection(str, Enum):
    """The moves a phase runs on."""

    ANY = "any"
    GAINING_ROLLOUT = "gaining_rollout"
    """Only moves that give the rollout side GPUs (for example starting engines)."""
    GAINING_TRAINING = "gaining_training"
    """Only moves that give the training side GPUs (for example arriving trainers' set-up)."""


class Link(str, Enum):
    """The path a phase's bytes take, whose bandwidth scales its per-GB time."""

    HOST = "host"
    """Device-to-host-to-device staging over PCIe."""
    INTERCONNECT = "interconnect"
    """GPU-to-GPU (NVLink inside a node, the network across nodes)."""


class PhaseCostParams(BaseModel):
    """One phase of one strategy: its dependencies, its placement and its cost parameters."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    base_s: float = Field(ge=0, description="Seconds the phase takes whatever it moves.")
    s_per_gb: float = Field(
        default=0.0, ge=0, description="Seconds per GB moved, at the reference bandwidth."
    )
    s_per_moved_gpu: float = Field(
        default=0.0,
        ge=0,
        description="Seconds per GPU that changes role in the move, for a phase that moves no "
        "state: 0 where every device does its part at once (its own GPU each); above 0 where "
        "the devices' parts queue (engines woken or put to sleep on one shared GPU).",
    )
    moves: StateMoved = Field(default=StateMoved.NONE, description="State the phase moves.")
    link: Link = Field(default=Link.HOST, description="Link the moved bytes cross.")
    critical: bool = Field(
        default=True, description="True: the pipeline waits; False: overlaps the next step."
    )
    depends_on: list[PhaseName] = Field(
        default_factory=list, description="Phases that must end before this one starts."
    )
    share: MovedShare = Field(
        default=MovedShare.WHOLE,
        description="whole: the phase moves all of `moves` on every move; changed_owner: only "
        "the part of the trainers' slices that changes owner from the old to the new trainer "
        "count (a re-cut).",
    )
    on_moves: MoveDirection = Field(
        default=MoveDirection.ANY,
        description="The moves the phase runs on (any, gaining_rollout, gaining_training); on "
        "the others it takes no time. Rollout re-init, which starts engines, is always "
        "gaining_rollout.",
    )


def _phase(base_s: float, deps: list[PhaseName], **kw: Any) -> PhaseCostParams:
    """A phase of the default tables; `kw` sets any other field, validated by the model."""
    return PhaseCostParams(base_s=base_s, depends_on=deps, **kw)


# The paper's model: Qwen3-8B (8.2e9 parameters), 16.4 GB of bf16 weights, 98.4 GB of fp32 master
# copy plus Adam moments, 114.8 GB of training state. Per-GB rates below are set so that these
# byte counts reproduce the paper's phase totals exactly.
_W, _O, _T = 16.4, 98.4, 114.8
P = PhaseName


def default_stop_and_rebuild_phases() -> dict[PhaseName, PhaseCostParams]:
    # Every phase blocks, one after another: 59.7 + 60.3 + 104.1 + 30.7 = 254.8 s.
    return {
        P.STATE_EXPORT: _phase(20.0, [], s_per_gb=39.7 / _T, moves=StateMoved.TRAIN_STATE),
        P.WORKER_REINIT: _phase(60.3, [P.STATE_EXPORT]),
        P.COMM_PREWARM: _phase(30.0, [P.WORKER_REINIT]),
        P.WEIGHT_RESTORE: _phase(
            10.0, [P.COMM_PREWARM], s_per_gb=20.0 / _W, moves=StateMoved.WEIGHTS
        ),
        P.OPTIMIZER_RESTORE: _phase(
            10.0, [P.WEIGHT_RESTORE], s_per_gb=34.1 / _O, moves=StateMoved.OPTIMIZER_STATE
        ),
        P.ROLLOUT_REINIT: _phase(15.0, [P.OPTIMIZER_RESTORE]),
        P.POSTPROCESS: _phase(8.0, [P.ROLLOUT_REINIT]),
        P.WEIGHT_SYNC: _phase(
            2.0,
            [P.POSTPROCESS],
            s_per_gb=5.7 / _W,
            moves=StateMoved.WEIGHTS,
            link=Link.INTERCONNECT,
        ),
    }


def default_overlapped_phases() -> dict[PhaseName, PhaseCostParams]:
    # Critical chain 60.7 + 32.6 + 45.8 + 48.1 = 187.2 s; communicator prewarm starts at once from
    # cached rank maps, optimizer restore is deferred into the first step on the new topology.
    return {
        P.STATE_EXPORT: _phase(20.0, [], s_per_gb=40.7 / _T, moves=StateMoved.TRAIN_STATE),
        P.WORKER_REINIT: _phase(32.6, [P.STATE_EXPORT]),
        P.COMM_PREWARM: _phase(30.0, [], critical=False),
        P.WEIGHT_RESTORE: _phase(
            25.8, [P.WORKER_REINIT], s_per_gb=20.0 / _W, moves=StateMoved.WEIGHTS
        ),
        P.ROLLOUT_REINIT: _phase(25.9, [P.WEIGHT_RESTORE]),
        P.POSTPROCESS: _phase(12.2, [P.ROLLOUT_REINIT]),
        P.WEIGHT_SYNC: _phase(
            4.3,
            [P.POSTPROCESS, P.COMM_PREWARM],
            s_per_gb=5.7 / _W,
            moves=StateMoved.WEIGHTS,
            link=Link.INTERCONNECT,
        ),
        # Deferred: streams through bounded host buffers during the first step on the new
        # topology and must land before its optimizer step reads the moments.
        P.OPTIMIZER_RESTORE: _phase(
            2.0,
            [P.WEIGHT_SYNC],
            s_per_gb=1.0 / 25.0,
            moves=StateMoved.OPTIMIZER_STATE,
            critical=False,
        ),
    }


def gb_moved(state: StateMoved, model: ModelConfig) -> float:
    return {
        StateMoved.NONE: 0.0,
        StateMoved.WEIGHTS: model.weights_gb,
        StateMoved.OPTIMIZER_STATE: model.optimizer_state_gb,
        StateMoved.TRAIN_STATE: model.train_state_gb,
        StateMoved.MASTER_WEIGHTS: model.num_params * model.master_bytes_per_param / GB,
        StateMoved.OPTIMIZER_MOMENTS: model.num_params * model.optimizer_bytes_per_param / GB,
    }[state]


def changed_owner_fraction(trainers_before: int, trainers_after: int) -> float:
    """Share of a state cut into equal contiguous slices, one per trainer, that changes owner
    when it is re-cut from `trainers_before` to `trainers_after` slices, the trainers that stay
    keeping their rank order: 1 minus the overlap of each remaining rank's old and new slice.
    2 -> 1 and 2 -> 3 move half the state, 1 -> 3 and 3 -> 1 two thirds."""
    if trainers_before < 1 or trainers_after < 1:
        raise ValueError(f"trainer counts must be >= 1, got {trainers_before}, {trainers_after}")
    kept = 0.0
    for rank in range(min(trainers_before, trainers_after)):
        lo = max(rank / trainers_before, rank / trainers_after)
        hi = min((rank + 1) / trainers_before, (rank + 1) / trainers_after)
        kept += max(0.0, hi - lo)
    return max(0.0, 1.0 - kept)
