"""Communicator reuse: every candidate topology's process groups, built once and warmed early.

Building a process group is a rendezvous of its members (and, for torch.distributed, a call that
every rank of the world must make, in the same order); doing it at a resize puts it on the critical
path. Here the group memberships and rank maps of every candidate topology are computed once from
the candidate list, and a background thread on every rank creates the groups in one fixed order
(the sorted list of distinct memberships: identical on every rank without any messages) and warms
each with a one-element all-reduce while training steps run. A resize then *binds* the target
topology's groups: it waits only if the background work has not reached them yet, and records how
long it waited.

With reuse switched off (`CommunicatorCache(..., reuse=False)`, the ablation), `bind` builds and
warms the target's groups on the spot, on every rank, which is what the cost of not caching is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import Enum

import torch
import torch.distributed as dist

from dynaresize.policies.types import Allocation
from dynaresize.traces.phases import Role


class GroupKind(str, Enum):
    TRAIN_DP = "train_dp"
    """The trainers of a topology: gradient all-reduce and shard gathers."""
    WEIGHT_SYNC = "weight_sync"
    """Trainer rank 0 and every rollout worker: the weight push after each step."""


def trainers_first(allocation: Allocation) -> tuple[Role, ...]:
    """The default device-to-role map: the first `train_gpus` workers train, the rest roll out."""
    return (Role.TRAIN,) * allocation.train_gpus + (Role.ROLLOUT,) * allocation.rollout_gpus


@dataclass(frozen=True)
class TopologyPlan:
    """Who does what in one candidate topology, and which groups it needs."""

    allocation: Allocation
    device_roles: tuple[Role, ...]
    trainer_ranks: tuple[int, ...]
    """Global ranks of the trainers, in data-parallel rank order."""
    rollout_ranks: tuple[int, ...]

    @property
    def memberships(self) -> dict[GroupKind, tuple[int, ...]]:
        return {
            GroupKind.TRAIN_DP: self.trainer_ranks,
            GroupKind.WEIGHT_SYNC: tuple(sorted((self.trainer_ranks[0], *self.rollout_ranks))),
        }

    def dp_rank(self, global_rank: int) -> int | None:
        """Data-parallel rank of a worker, None when it does not train in this topology."""
        if global_rank in self.trainer_ranks:
            return self.trainer_ranks.index(global_rank)
        return None

    def role(self, global_rank: int) -> Role:
        return self.device_roles[global_rank]


def plan_topology(
    allocation: Allocation, *, roles_of: Callable[[Allocation], Sequence[Role]] = trainers_first
) -> TopologyPlan:
    roles = tuple(roles_of(allocation))
    if len(roles) != allocation.total_gpus:
        raise ValueError(f"role map of {allocation} has {len(roles)} entries")
    trainers = tuple(i for i, r in enumerate(roles) if r is Role.TRAIN)
    rollouts = tuple(i for i, r in enumerate(roles) if r is Role.ROLLOUT)
    if len(trainers) != allocation.train_gpus:
        raise ValueError(f"role map of {allocation} has {len(trainers)} trainers")
    return TopologyPlan(allocation, roles, trainers, rollouts)


def distinct_memberships(plans: Sequence[TopologyPlan]) -> list[tuple[int, ...]]:
    """Every membership any plan needs, once each, in the one order all ranks create them."""
    return sorted(
        {m for plan in plans for m in plan.memberships.values()}, key=lambda m: (len(m), m)
    )


@dataclass
class BoundTopology:
    """The groups a worker uses on one topology, as handed out by `CommunicatorCache.bind`."""

    plan: TopologyPlan
    groups: dict[GroupKind, dist.ProcessGroup | None]
    """None where this worker is not a member."""
    waited_s: float
    """Time `bind` blocked: waiting for the background builder, or building on the spot."""
    built_on_bind: int
    """Groups created inside `bind` (0 when the cache had them ready)."""

    def group(self, kind: GroupKind) -> dist.ProcessGroup | None:
        return self.groups[kind]


@dataclass
class CacheStats:
    groups_built_in_background: int = 0
    groups_built_on_bind: int = 0
    background_s: float = 0.0
    """Wall time of the background build and prewarm, start to finish."""
    bind_wait_s: list[float] = field(default_factory=list)


class CommunicatorCache:
    """One per worker. Every worker of the world must build it with the same candidates."""

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        candidates: Sequence[Allocation],
        roles_of: Callable[[Allocation], Sequence[Role]] = trainers_first,
        reuse: bool = True,
        backend: str = "gloo",
        timeout_s: float = 600.0,
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.reuse = reuse
        self.backend = backend
        self.timeout = timedelta(seconds=timeout_s)
        self.plans = {a.label: plan_topology(a, roles_of=roles_of) for a in candidates}
        for plan in self.plans.values():
            if plan.allocation.total_gpus != world_size:
                raise ValueError(f"candidate {plan.allocation} does not use {world_size} workers")
        self.order = distinct_memberships(list(self.plans.values()))
        self.stats = CacheStats()
        self._groups: dict[tuple[int, ...], dist.ProcessGroup | None] = {}
        self._ready: dict[tuple[int, ...], threading.Event] = {
            m: threading.Event() for m in self.order
        }
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._on_demand: list[dist.ProcessGroup] = []

    # --- background build ------------------------------------------------------------------

    def start_prewarm(self) -> None:
        """Create and warm every candidate's groups in a background thread (all ranks call this)."""
        if not self.reuse:
            return
        if self._thread is not None:
            raise RuntimeError("prewarm already started")
        self._thread = threading.Thread(target=self._build_all, name="comm-prewarm", daemon=True)
        self._thread.start()

    def _build_all(self) -> None:
        started = time.perf_counter()
        try:
            for members in self.order:
                self._groups[members] = self._create_and_warm(members)
                self.stats.groups_built_in_background += 1
                self._ready[members].set()
        except BaseException as exc:  # reported to whoever binds next
            self._error = exc
            for event in self._ready.values():
                event.set()
        self.stats.background_s = time.perf_counter() - started

    def _create_and_warm(self, members: tuple[int, ...]) -> dist.ProcessGroup | None:
        group = dist.new_group(list(members), backend=self.backend, timeout=self.timeout)
        if self.rank not in members:
            return None
        probe = torch.ones(1)
        dist.all_reduce(probe, group=group)
        if int(probe.item()) != len(members):
            raise RuntimeError(f"prewarm of group {members} summed {probe.item()}")
        return group

    def wait_prewarmed(self, timeout_s: float | None = None) -> bool:
        """Block until the background build has finished (for tests and orderly shutdown)."""
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    # --- bind ------------------------------------------------------------------------------

    def plan(self, allocation: Allocation) -> TopologyPlan:
        try:
            return self.plans[allocation.label]
        except KeyError:
            raise ValueError(f"{allocation} is not a candidate topology") from None

    def bind(self, allocation: Allocation) -> BoundTopology:
        """The groups of `allocation`. Every rank calls this at the same resize boundary."""
        plan = self.plan(allocation)
        started = time.perf_counter()
        built = 0
        groups: dict[GroupKind, dist.ProcessGroup | None] = {}
        if self.reuse and self._thread is not None:
            for kind, members in plan.memberships.items():
                self._ready[members].wait()
                if self._error is not None:
                    raise RuntimeError("building the cached process groups failed") from self._error
                groups[kind] = self._groups[members]
        else:
            self._release_on_demand()
            # Same order on every rank: the membership order of the plan's group kinds.
            for kind, members in plan.memberships.items():
                group = self._create_and_warm(members)
                groups[kind] = group
                if group is not None:
                    self._on_demand.append(group)
                built += 1
            self.stats.groups_built_on_bind += built
        waited = time.perf_counter() - started
        self.stats.bind_wait_s.append(waited)
        return BoundTopology(plan=plan, groups=groups, waited_s=waited, built_on_bind=built)

    def _release_on_demand(self) -> None:
        """Groups built for the previous topology without the cache are not kept around."""
        for group in self._on_demand:
            dist.destroy_process_group(group)
        self._on_demand.clear()
