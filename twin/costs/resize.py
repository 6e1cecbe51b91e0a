"""Resize cost: a small DAG of named phases per strategy, and its critical path.

A resize is a set of phases (`traces.phases.PhaseName`), each with dependencies, each either on
the critical path (the pipeline waits for it) or in the background (it overlaps the first step on
the new topology). A phase lasts `base_s + s_per_gb * gb_moved`, where `gb_moved` is the state it
moves (weights, optimizer state, or both) and `s_per_gb` is scaled by the ratio of a reference
bandwidth to the bandwidth of the link it crosses. The pipeline stalls for the latest end of any
critical phase (the longest path through the DAG, background dependencies included); background
work still running after that point slows the next step by `background_contention` of its length
and the next training stage cannot finish before it does. A first training step on a new split
may be slower for reasons of its own (new buffers and allocations on a device the roles share);
where calibration measured that excess (`first_train_step_s`, per trainer count), the next
training stage pays the larger of it and the contention.

The phases' parameters and the default tables (the paper's breakdown for Qwen3-8B on 8 H20s)
are in `resize_phases`; this module plans a resize from them.

Per-path bandwidths (`path_bandwidths`: shared memory, device to device, network) have no
default figures, since the paper measures none: they come from `dynaresize calibrate` on the
executor's transfer records, and their `source` names those records. Without them a re-cut is
priced at its phases' own rates, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dynaresize.policies.types import Allocation
from dynaresize.traces.phases import PhaseName, StrategyName

from .memory import ModelConfig
from .phase_order import topological_order
from .resize_phases import (
    Link,
    MoveDirection,
    MovedShare,
    PhaseCostParams,
    StateMoved,
    changed_owner_fraction,
    default_overlapped_phases,
    default_stop_and_rebuild_phases,
    gb_moved,
)
from .resize_strategies import STRATEGY_COSTS
from .transfer_paths import PathBandwidths, off_path_seconds, recut_shares_by_path

__all__ = [
    "Link",
    "MoveDirection",
    "MovedShare",
    "PhaseCostParams",
    "PlannedPhase",
    "ResizeCostParams",
    "ResizePlan",
    "ResizePlans",
    "StateMoved",
    "changed_owner_fraction",
    "gb_moved",
    "plan_resize",
    "plan_resizes",
    "runs_on_move",
]


class ResizeCostParams(BaseModel):
    """Phase DAGs of both strategies and how background work slows the next step."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    reference_host_bandwidth_gbps: float = Field(
        default=25.0,
        gt=0,
        description="Host staging bandwidth at which the per-GB rates hold (GB/s).",
    )
    reference_interconnect_bandwidth_gbps: float = Field(
        default=400.0,
        gt=0,
        description="GPU-to-GPU bandwidth at which the per-GB rates hold (GB/s).",
    )
    background_contention: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="Share of background work overlapping the next step by which it slows it.",
    )
    coordination_s: float = Field(
        default=0.0,
        ge=0,
        description="Seconds of every resize's stall outside its phases: the driver's round "
        "trips to the workers and the records written at the boundary.",
    )
    first_train_step_s: float = Field(
        default=0.0,
        ge=0,
        description="Seconds the first training step on a new split takes beyond the train "
        "stage's model, for trainer counts without a figure of their own in "
        "first_train_step_s_by_trainers. Measured against the model, it holds whatever that "
        "step carries (the background work's contention included), so a plan charges the "
        "larger of it and the background contention, never both.",
    )
    first_train_step_s_by_trainers: dict[int, float] = Field(
        default_factory=dict,
        description="first_train_step_s of moves to a split with this many trainers (the key), "
        "where the traces show enough of them.",
    )
    stop_and_rebuild: dict[PhaseName, PhaseCostParams] = Field(
        default_factory=default_stop_and_rebuild_phases,
        description="Phases of the stop-and-rebuild strategy.",
    )
    overlapped: dict[PhaseName, PhaseCostParams] = Field(
        default_factory=default_overlapped_phases, description="Phases of the overlapped strategy."
    )
    activate: PhaseCostParams = Field(  # a second, plus a weight sync's gather-and-load rate
        default=PhaseCostParams(base_s=1.0, s_per_gb=0.3, moves=StateMoved.WEIGHTS),
        description="Lending within a step: waking the sleeping replicas on the trainers' GPUs "
        "and loading the current weights (bytes: each GPU's tensor-parallel share).",
    )
    deactivate: PhaseCostParams = Field(  # a second, plus offloading weights at 25 GB/s
        default=PhaseCostParams(base_s=1.0, s_per_gb=0.04, moves=StateMoved.WEIGHTS),
        description="Lending within a step: aborting the lent replicas' requests and putting "
        "them back to sleep (bytes: each GPU's tensor-parallel share).",
    )
    path_bandwidths: PathBandwidths | None = Field(
        default=None,
        description="Measured bandwidth of each transfer path (shm, device, network) and where "
        "the figures come from; with them, the part of a re-cut (share: changed_owner) that "
        "crosses nodes costs its path's difference in seconds per GB. None: every re-cut is "
        "priced at its phases' own rates, whatever nodes it crosses.",
    )

    @field_validator("stop_and_rebuild", "overlapped")
    @classmethod
    def _engines_start_only_where_rollout_gains(
        cls, table: dict[PhaseName, PhaseCostParams]
    ) -> dict[PhaseName, PhaseCostParams]:
        """A rollout re-init starts engines, which only a move that gives rollout GPUs needs."""
        reinit = table.get(PhaseName.ROLLOUT_REINIT)
        if reinit is not None and reinit.on_moves is MoveDirection.GAINING_TRAINING:
            raise ValueError(
                "rollout_reinit starts rollout engines: it cannot run on moves gaining training"
            )
        return table

    @field_validator("first_train_step_s_by_trainers")
    @classmethod
    def _counts_and_seconds(cls, table: dict[int, float]) -> dict[int, float]:
        for trainers, seconds in table.items():
            if trainers < 1 or not seconds >= 0 or seconds == float("inf"):
                raise ValueError(
                    f"first_train_step_s_by_trainers: {trainers} trainers -> {seconds} s; "
                    "trainer counts are >= 1 and seconds finite and >= 0"
                )
        return table

    def first_train_step_extra_s(self, trainers_after: int | None) -> float:
        """Seconds the first training step after a move to `trainers_after` trainers takes
        beyond a steady one (the general figure where the count has none, or is not known)."""
        if trainers_after is None:
            return self.first_train_step_s
        return self.first_train_step_s_by_trainers.get(trainers_after, self.first_train_step_s)

    @model_validator(mode="after")
    def _acyclic(self) -> ResizeCostParams:
        for strategy in StrategyName:
            topological_order(self.phases(strategy), strategy=strategy)
        return self

    def phases(self, strategy: StrategyName) -> dict[PhaseName, PhaseCostParams]:
        """The phase table of a strategy, as plans and fits read it (`STRATEGY_COSTS` says
        which: `host_sync` does the overlapped strategy's work with nothing overlapped, so it is
        that table with every phase on the critical path). In every table the rollout re-init,
        which starts engines, runs on moves that give rollout GPUs only (`on_moves: any` is read
        as that)."""
        costs = STRATEGY_COSTS[strategy]
        table: dict[PhaseName, PhaseCostParams] = getattr(self, costs.table)
        if costs.every_phase_critical:
            table = {
                name: phase.model_copy(update={"critical": True}) for name, phase in table.items()
            }
        reinit = table.get(PhaseName.ROLLOUT_REINIT)
        if reinit is None or reinit.on_moves is MoveDirection.GAINING_ROLLOUT:
            return table
        gaining = reinit.model_copy(update={"on_moves": MoveDirection.GAINING_ROLLOUT})
        return {**table, PhaseName.ROLLOUT_REINIT: gaining}

    def bandwidth_scale(
        self, link: Link, *, host_bandwidth_gbps: float, interconnect_bandwidth_gbps: float
    ) -> float:
        """Factor a phase's s_per_gb is multiplied by on links of these bandwidths."""
        if link is Link.HOST:
            return self.reference_host_bandwidth_gbps / host_bandwidth_gbps
        return self.reference_interconnect_bandwidth_gbps / interconnect_bandwidth_gbps


@dataclass(frozen=True)
class PlannedPhase:
    name: PhaseName
    start_s: float
    """Offset from the start of the resize."""
    duration_s: float
    critical: bool
    bytes_moved: int

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(frozen=True)
class ResizePlan:
    """A resize laid out in time, relative to its start."""

    strategy: StrategyName
    phases: tuple[PlannedPhase, ...]
    critical_s: float
    """How long the pipeline stalls: the latest end of a critical phase."""
    background_tail_s: float
    """How long background work runs on after the stall ends (0 if it ends before)."""
    slowdown_s: float
    """Seconds the next training stage takes beyond a steady one: the background work's
    contention with it, or the measured excess of a first step on the new split if larger."""

    @property
    def total_s(self) -> float:
        return self.critical_s + self.background_tail_s


class ResizePlans:
    """A strategy's plan of every move, made on first use. What a move costs depends on its
    direction (new rollout engines start only where the rollout side gains GPUs; a phase may run
    only on moves of one direction) and, for phases that re-cut the trainers' state, on the
    trainer counts before and after."""

    def __init__(self, **plan_kwargs) -> None:
        self._kwargs = plan_kwargs
        self._plans: dict[tuple, ResizePlan] = {}

    def _plan(self, gains_rollout: bool, trainers: tuple[int, int] | None) -> ResizePlan:
        key = (gains_rollout, trainers)
        if key not in self._plans:
            before, after = trainers if trainers else (None, None)
            self._plans[key] = plan_resize(
                **self._kwargs,
                starts_rollout_engines=gains_rollout,
                trainers_before=before,
                trainers_after=after,
            )
        return self._plans[key]

    @property
    def gains_rollout(self) -> ResizePlan:
        """A move that gives rollout GPUs (and starts engines), moving whole state."""
        return self._plan(True, None)

    @property
    def no_new_rollout(self) -> ResizePlan:
        """A move that gives training GPUs, moving whole state."""
        return self._plan(False, None)

    @property
    def costlier(self) -> ResizePlan:
        """The costlier of the two directions with whole state moved and one GPU changing role:
        one figure for a resize where the move is not known (an upper bound of every move's
        critical path where no phase costs per GPU changing role)."""
        return max(self.gains_rollout, self.no_new_rollout, key=lambda plan: plan.critical_s)

    def between(self, before: Allocation, after: Allocation) -> ResizePlan:
        return self._plan(
            after.rollout_gpus > before.rollout_gpus, (before.train_gpus, after.train_gpus)
        )


def plan_resizes(**kwargs) -> ResizePlans:
    """The plans of a strategy; takes `plan_resize`'s keyword arguments but the move's own."""
    return ResizePlans(**kwargs)


def plan_resize(
    *,
    strategy: StrategyName,
    model: ModelConfig,
    params: ResizeCostParams,
    host_bandwidth_gbps: float,
    interconnect_bandwidth_gbps: float,
    starts_rollout_engines: bool = True,
    trainers_before: int | None = None,
    trainers_after: int | None = None,
    workers_per_node: int | None = None,
) -> ResizePlan:
    """Lay the strategy's DAG out in time: each phase starts when its last dependency ends.

    A phase that moves bytes takes at least the time its link needs for them
    (`_link_capacity_gbps`), whatever its per-GB rate says: a rate fitted on small models or
    other hardware cannot imply a transfer faster than the configured link.

    `starts_rollout_engines` says the move gives the rollout side GPUs; False (it gains none)
    makes the rollout re-init phase, and every phase that runs only on moves gaining rollout,
    take no time, and True those that run only on moves gaining training. The trainer counts
    before and after size the phases that move only the re-cut share of the state; without them
    such a phase moves all of it, and the GPUs changing role (`gpus_changing_role`) scale a
    phase's `s_per_moved_gpu` (one GPU where the move is not known). `workers_per_node` places
    the workers on nodes, so that with `params.path_bandwidths` the re-cut pieces that cross
    nodes are priced at the network's rate (transfer_paths.py); without it every worker counts
    as one node's.
    """
    phases = params.phases(strategy)
    bandwidth_scale = {
        link: params.bandwidth_scale(
            link,
            host_bandwidth_gbps=host_bandwidth_gbps,
            interconnect_bandwidth_gbps=interconnect_bandwidth_gbps,
        )
        for link in Link
    }
    moved_gpus = gpus_changing_role(trainers_before, trainers_after)
    link_gbps = _link_capacity_gbps(
        host_bandwidth_gbps, interconnect_bandwidth_gbps, trainers_before, trainers_after
    )
    end: dict[PhaseName, float] = {}
    planned = []
    for name in topological_order(phases, strategy=strategy):
        spec = phases[name]
        start_s = max((end[d] for d in spec.depends_on), default=0.0)
        gb_state = gb = gb_moved(spec.moves, model)
        recut = None
        if spec.share is MovedShare.CHANGED_OWNER and trainers_before and trainers_after:
            recut = (trainers_before, trainers_after)
            gb *= changed_owner_fraction(trainers_before, trainers_after)
        duration_s = spec.base_s + spec.s_per_gb * gb * bandwidth_scale[spec.link]
        duration_s += spec.s_per_moved_gpu * moved_gpus
        if recut is not None and params.path_bandwidths is not None:
            off_path_s = _off_path_s(params.path_bandwidths, gb_state, recut, workers_per_node)
            duration_s = max(0.0, duration_s + off_path_s)
        duration_s = max(duration_s, gb / link_gbps[spec.link])
        if not runs_on_move(spec, gains_rollout=starts_rollout_engines):
            duration_s, gb = 0.0, 0.0
        end[name] = start_s + duration_s
        planned.append(PlannedPhase(name, start_s, duration_s, spec.critical, int(gb * 1e9)))
    critical_s = max((p.end_s for p in planned if p.critical), default=0.0)
    critical_s += params.coordination_s
    overhang = [max(0.0, p.end_s - max(p.start_s, critical_s)) for p in planned if not p.critical]
    background_tail_s = max(overhang, default=0.0)
    # The measured first-step excess holds the background work's contention too: the larger.
    slowdown_s = max(
        params.background_contention * sum(overhang),
        params.first_train_step_extra_s(trainers_after),
    )
    return ResizePlan(strategy, tuple(planned), critical_s, background_tail_s, slowdown_s)


def gpus_changing_role(trainers_before: int | None, trainers_after: int | None) -> int:
    """GPUs that change role in a move between these trainer counts (the total stays, so the
    rollout side changes by as many); one where the move is not known."""
    if trainers_before is None or trainers_after is None:
        return 1
    return abs(trainers_after - trainers_before)


def _link_capacity_gbps(
    host_bandwidth_gbps: float,
    interconnect_bandwidth_gbps: float,
    trainers_before: int | None,
    trainers_after: int | None,
) -> dict[Link, float]:
    """The most GB per second a phase's bytes can cross each link at: no fitted or configured
    per-GB rate may imply more. Host staging runs on every trainer's own PCIe link at once, as
    many lanes as the smaller trainer count (one when the move is not known); GPU-to-GPU
    traffic crosses the configured link."""
    lanes = min(trainers_before, trainers_after) if trainers_before and trainers_after else 1
    return {
        Link.HOST: host_bandwidth_gbps * max(1, lanes),
        Link.INTERCONNECT: interconnect_bandwidth_gbps,
    }


def _off_path_s(
    bandwidths: PathBandwidths,
    gb_state: float,
    trainers: tuple[int, int],
    workers_per_node: int | None,
) -> float:
    """Seconds a re-cut's pieces off the same-node path add to its phase (transfer_paths.py)."""
    shares = recut_shares_by_path(
        *trainers, workers_per_node=workers_per_node, same_node_path=bandwidths.same_node_path
    )
    return off_path_seconds(gb_state, shares, bandwidths)


def runs_on_move(spec: PhaseCostParams, *, gains_rollout: bool) -> bool:
    """Whether the phase runs on a move of this direction (see `PhaseCostParams.on_moves`)."""
    if spec.on_moves is MoveDirection.GAINING_ROLLOUT:
        return gains_rollout
    if spec.on_moves is MoveDirection.GAINING_TRAINING:
        return not gains_rollout
    return True
