"""Resize strategies: how the workers move from one split to another at a step boundary.

`ResizeStrategy` is the slot every strategy fills. The driver calls `resize()` at a step boundary
and records the phases it returns under the shared phase names; `after_step()` lets a strategy
do background work between resizes (a communicator cache prewarms there) and `before_train()` is
the synchronisation point a strategy with deferred work must honour before the first optimizer
step reads the state (a deferred optimizer reload completes there).

`HostSyncStrategy` (`host_sync`) is the simple, correct one: every phase on the critical path,
state through host memory (the Ray object store), roles switched in-process on the same actors:
1. state_export      every old trainer copies its ZeRO-1 slice (fp32 master, AdamW moments) to host;
2. worker_reinit     workers that become trainers switch role (the model object is kept);
3. rollout_reinit    workers that become rollout replicas build their engine (KV cache);
4. comm_prewarm      the trainer group and the weight-sync group of the new split are built
                     and warmed with a small collective (on every worker: world collective);
5. weight_restore    each new trainer re-cuts its master slice from the old slices and the model
                     is all-gathered from the slices;
6. optimizer_restore each new trainer loads the AdamW moments of its slice;
7. weight_sync       the first trainer broadcasts the weights to the new set of replicas;
8. postprocess       the driver's rank maps and references are updated.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import ray

from dynaresize.traces.phases import PhaseName, Role, StrategyName

from .roles import RoleMap
from .runtime import Runtime
from .shards import ShardLayout, sources_of


@dataclass(frozen=True)
class PhaseTiming:
    """One phase as it happened, on the run's clock."""

    phase: PhaseName
    start_s: float
    end_s: float
    critical: bool
    bytes_moved: int = 0


@dataclass
class PhaseLog:
    """Collects a resize's phases; `with log.phase(NAME):` times one on the run's clock."""

    runtime: Runtime
    phases: list[PhaseTiming] = field(default_factory=list)

    @contextmanager
    def phase(self, name: PhaseName, *, critical: bool = True) -> Iterator[dict]:
        extra = {"bytes_moved": 0}
        start = self.runtime.clock()
        yield extra
        self.phases.append(
            PhaseTiming(
                phase=name,
                start_s=start,
                end_s=self.runtime.clock(),
                critical=critical,
                bytes_moved=int(extra["bytes_moved"]),
            )
        )


class ResizeStrategy(ABC):
    """How a resize is carried out. One object per run; it may keep state between resizes."""

    name: StrategyName

    def after_step(self, runtime: Runtime) -> None:  # noqa: B027 - optional hook
        """Called after every step's records: background preparation (nothing by default)."""

    def before_train(self, runtime: Runtime) -> None:  # noqa: B027 - optional hook
        """Called before every training step: finish whatever the update is about to read."""

    def pop_background_phases(self) -> list[PhaseTiming]:
        """Background phases that ended since the last call (the driver records them)."""
        return []

    @abstractmethod
    def resize(self, runtime: Runtime, *, target: RoleMap) -> list[PhaseTiming]:
        """Move the workers from `runtime.roles` to `target`; set `runtime.roles`."""


def export_shards_to_host(runtime: Runtime, old: RoleMap) -> tuple[dict[int, object], int]:
    """Every old trainer puts a host copy of its ZeRO-1 slice in the object store.

    Returns the references by old trainer rank and the bytes copied.
    """
    exported = runtime.run(old.trainer_ids, "stash_shard", doing="exporting state")
    shard_refs = {old.trainer_rank(w): ref_list[0] for w, (ref_list, _) in exported.items()}
    return shard_refs, sum(nbytes for _, nbytes in exported.values())


def switch_roles_and_bind(
    runtime: Runtime, log: PhaseLog, *, target: RoleMap, bind_method: str, bind_doing: str
) -> None:
    """The role switch shared by the in-process strategies, as three timed phases.

    Arriving trainers and new rollout replicas switch role on the same actors, then every worker
    binds the target split's groups through `bind_method` (built now, or cached and prewarmed)
    and the trainers take their new ranks; `runtime.roles` becomes `target`.
    """
    old = runtime.roles
    version = runtime.weights_version
    new_trainers = target.arriving_trainers(old)
    new_replicas = tuple(w for w in target.rollout_ids if w not in old.rollout_ids)
    with log.phase(PhaseName.WORKER_REINIT):
        runtime.run(
            new_trainers,
            "set_role",
            doing="becoming a trainer",
            role=Role.TRAIN,
            weights_version=version,
        )
    with log.phase(PhaseName.ROLLOUT_REINIT):
        runtime.run(
            new_replicas,
            "set_role",
            doing="becoming a rollout replica",
            role=Role.ROLLOUT,
            weights_version=version,
        )
    with log.phase(PhaseName.COMM_PREWARM):
        runtime.run(runtime.all_ids, bind_method, doing=bind_doing, roles=target)
        runtime.roles = target
        runtime.run(target.trainer_ids, "bind_trainer_rank", doing="binding trainer ranks")


def restore_weights_from_host(
    runtime: Runtime,
    *,
    old: RoleMap,
    target: RoleMap,
    numel: int,
    shard_refs: dict[int, object],
) -> int:
    """Each new trainer re-cuts its master slice from the exported old slices; bytes fetched."""
    old_layout = ShardLayout(numel=numel, num_ranks=old.num_trainers)
    new_layout = ShardLayout(numel=numel, num_ranks=target.num_trainers)
    calls = {
        w: (
            (),
            {
                "old_shard_refs": [
                    shard_refs[r]
                    for r in sources_of(old_layout, new_layout, target.trainer_rank(w))
                ]
            },
        )
        for w in target.trainer_ids
    }
    restored = runtime.gather(
        runtime.call_each(calls, "restore_weights"), doing="restoring weights"
    )
    return sum(restored.values())


class HostSyncStrategy(ResizeStrategy):
    name = StrategyName.HOST_SYNC

    def resize(self, runtime: Runtime, *, target: RoleMap) -> list[PhaseTiming]:
        old = runtime.roles
        log = PhaseLog(runtime)
        version = runtime.weights_version

        with log.phase(PhaseName.STATE_EXPORT) as extra:
            shard_refs, extra["bytes_moved"] = export_shards_to_host(runtime, old)
        switch_roles_and_bind(
            runtime, log, target=target, bind_method="bind_groups", bind_doing="building groups"
        )

        numel = ray.get(runtime.workers[target.trainer_ids[0]].trainer_numel.remote())
        with log.phase(PhaseName.WEIGHT_RESTORE) as extra:
            extra["bytes_moved"] = restore_weights_from_host(
                runtime, old=old, target=target, numel=numel, shard_refs=shard_refs
            )
            runtime.run(target.trainer_ids, "refresh_model_from_master", doing="gathering weights")
        with log.phase(PhaseName.OPTIMIZER_RESTORE):
            runtime.run(target.trainer_ids, "restore_optimizer", doing="restoring optimizer")
        with log.phase(PhaseName.WEIGHT_SYNC) as extra:
            sizes = runtime.run(
                target.sync_ids, "sync_weights", doing="syncing weights", weights_version=version
            )
            extra["bytes_moved"] = int(sizes[target.trainer_ids[0]]["bytes"])
        with log.phase(PhaseName.POSTPROCESS):
            del shard_refs
            runtime.run(runtime.all_ids, "drop_stash", doing="releasing exported state")
        return log.phases


def build_strategy(name: StrategyName) -> ResizeStrategy:
    """The strategy object for a config's `resize_strategy`."""
    if name is StrategyName.HOST_SYNC:
        return HostSyncStrategy()
    if name not in _EXTRA_STRATEGIES:
        # Other strategies live in their own modules and register themselves on import.
        module = f"{__package__}.strategies.{name.value}"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise
    if name not in _EXTRA_STRATEGIES:
        raise NotImplementedError(f"resize_strategy {name.value} is not available in this build")
    return _EXTRA_STRATEGIES[name]()


_EXTRA_STRATEGIES: dict[StrategyName, type[ResizeStrategy]] = {}


def register_strategy(cls: type[ResizeStrategy]) -> type[ResizeStrategy]:
    """Class decorator for strategies defined in other modules (overlapped, stop_and_rebuild)."""
    if cls.name in _EXTRA_STRATEGIES or cls.name is StrategyName.HOST_SYNC:
        raise ValueError(f"resize strategy {cls.name.value} is registered twice")
    _EXTRA_STRATEGIES[cls.name] = cls
    return cls
