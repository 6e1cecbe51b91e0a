"""Communicator reuse: every candidate split's process groups, built once and warmed early.

Building a process group is a rendezvous of its members (and, for torch.distributed, a call that
every rank of the world must make, in the same order); doing it at a resize puts it on the critical
path. Here the role map and group memberships of every candidate split are computed once from
the candidate list, and a background thread on every rank creates the groups in one fixed order
(the sorted list of distinct memberships: identical on every rank without any messages) and warms
each with a one-element all-reduce while training steps run. A resize then *binds* the target
split's groups: it waits only if the background work has not reached them yet, and records how
long it waited.

With reuse switched off (`CommunicatorCache(..., reuse=False)`, the ablation), `bind` builds and
warms the target's groups on the spot, on every rank, which is what the cost of not caching is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum

import torch
import torch.distributed as dist

from dynaresize.policies.types import Allocation

from ..roles import RoleMap


class GroupKind(str, Enum):
    TRAIN_DP = "train_dp"
    """The trainers of a split: gradient all-reduce and shard gathers."""
    WEIGHT_SYNC = "weight_sync"
    """Trainer rank 0 and every rollout worker: the weight push after each step."""


def memberships(roles: RoleMap) -> dict[GroupKind, tuple[int, ...]]:
    """The workers in each group a role map needs (ascending worker ids)."""
    return {GroupKind.TRAIN_DP: roles.trainer_ids, GroupKind.WEIGHT_SYNC: roles.sync_ids}


def distinct_memberships(role_maps: Sequence[RoleMap]) -> list[tuple[int, ...]]:
    """Every membership any role map needs, once each, in the one order all ranks create them."""
    return sorted(
        {m for roles in role_maps for m in memberships(roles).values()},
        key=lambda m: (len(m), m),
    )


@dataclass
class BoundGroups:
    """The groups a worker uses under one role map, as handed out by `CommunicatorCache.bind`."""

    roles: RoleMap
    groups: dict[GroupKind, dist.ProcessGroup | None]
    """None where this worker is not a member."""
    waited_s: float
    """Time `bind` blocked: waiting for the background builder, or building on the spot."""
    built_on_bind: int
    """Groups created inside `bind` (0 when the cache had them ready)."""
    cache_hits: int = 0
    """Groups taken ready-made from the cache (prewarmed in the background)."""

    def group(self, kind: GroupKind) -> dist.ProcessGroup | None:
        return self.groups[kind]


class CommunicatorCache:
    """One per worker. Every worker of the world must build it with the same candidates."""

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        candidates: Sequence[Allocation],
        reuse: bool = True,
        backend: str = "gloo",
        timeout_s: float = 600.0,
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.reuse = reuse
        self.backend = backend
        self.timeout = timedelta(seconds=timeout_s)
        for allocation in candidates:
            if allocation.total_gpus != world_size:
                raise ValueError(f"candidate {allocation} does not use {world_size} workers")
        self.role_maps = {a.label: RoleMap.for_allocation(a) for a in candidates}
        self.order = distinct_memberships(list(self.role_maps.values()))
        self.groups_built_in_background = 0
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
        try:
            for members in self.order:
                self._groups[members] = self._create_and_warm(members)
                self.groups_built_in_background += 1
                self._ready[members].set()
        except BaseException as exc:  # reported to whoever binds next
            self._error = exc
            for event in self._ready.values():
                event.set()

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

    def role_map(self, allocation: Allocation) -> RoleMap:
        try:
            return self.role_maps[allocation.label]
        except KeyError:
            raise ValueError(f"{allocation} is not a candidate split") from None

    def bind(self, allocation: Allocation) -> BoundGroups:
        """The groups of `allocation`. Every rank calls this at the same resize boundary."""
        roles = self.role_map(allocation)
        started = time.perf_counter()
        built = hits = 0
        groups: dict[GroupKind, dist.ProcessGroup | None] = {}
        if self.reuse and self._thread is not None:
            for kind, members in memberships(roles).items():
                self._ready[members].wait()
                if self._error is not None:
                    raise RuntimeError("building the cached process groups failed") from self._error
                groups[kind] = self._groups[members]
                hits += 1
        else:
            self._release_on_demand()
            # Same order on every rank: the order of the group kinds.
            for kind, members in memberships(roles).items():
                group = self._create_and_warm(members)
                groups[kind] = group
                if group is not None:
                    self._on_demand.append(group)
                built += 1
        waited = time.perf_counter() - started
        return BoundGroups(
            roles=roles, groups=groups, waited_s=waited, built_on_bind=built, cache_hits=hits
        )

    def close(self, timeout_s: float = 60.0) -> int:
        """Destroy every group this cache built (prewarmed or on demand), after the background
        build has ended; returns how many. A build still running after `timeout_s` (a peer is
        gone) is left to the process's exit."""
        if not self.wait_prewarmed(timeout_s):
            return 0
        built = [g for g in self._groups.values() if g is not None] + self._on_demand
        for group in built:
            dist.destroy_process_group(group)
        self._groups.clear()
        self._on_demand.clear()
        return len(built)

    def _release_on_demand(self) -> None:
        """Groups built for the previous split without the cache are not kept around."""
        for group in self._on_demand:
            dist.destroy_process_group(group)
        self._on_demand.clear()
