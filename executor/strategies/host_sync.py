"""`host_sync`: the simple, correct strategy, and the steps the overlapped one shares with it.

Every phase on the critical path, state through host memory (the Ray object store), roles
switched in-process on the same actors:
1. state_export      every old trainer copies its ZeRO-1 slice (fp32 master, AdamW moments) to host;
   rollout_release   replicas that leave Rollout release their engine (`rollout_engine.release`:
                     destroy, sleep or keep); next to nothing on moves that add replicas;
2. worker_reinit     workers that become trainers switch role (the model object is kept);
3. rollout_reinit    workers that become rollout replicas start, rebuild or wake their engine
                     and load the current weights into it;
4. comm_prewarm      the trainer group and the weight-sync group of the new split are built
                     and warmed with a small collective (on every worker: world collective);
5. weight_restore    each new trainer re-cuts its master slice from the old slices and the model
                     is all-gathered from the slices;
6. optimizer_restore each new trainer loads the AdamW moments of its slice;
7. weight_sync       the first trainer broadcasts the weights to the new set of replicas;
8. postprocess       the driver's rank maps and references are updated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ray import ObjectRef

from dynaresize.traces.phases import PhaseName, Role, StrategyName

from ..cluster.runtime import Runtime
from ..cluster.worker_setup import SetupPart
from ..roles import RoleMap
from ..worker.actor import LiveWorker
from ..worker.host_sync import HostSyncWorkerSide
from ..worker.shards import ShardLayout, ShardState, sources_of
from .strategy import PhaseLog, PhaseTiming, ResizeStrategy, Strategy


def export_shards_to_host(
    runtime: Runtime, old: RoleMap
) -> tuple[dict[int, ObjectRef[ShardState]], int]:
    """Every old trainer puts a host copy of its ZeRO-1 slice in the object store.

    Returns the references by old trainer rank and the bytes copied.
    """
    exported = runtime.call(old.trainer_ids, HostSyncWorkerSide.stash_shard).wait("exporting state")
    shard_refs = {old.trainer_rank(w): ref_list[0] for w, (ref_list, _) in exported.items()}
    return shard_refs, sum(nbytes for _, nbytes in exported.values())


def switch_roles_and_bind(
    runtime: Runtime,
    log: PhaseLog,
    *,
    target: RoleMap,
    bind: Callable[..., object],
    bind_doing: str,
) -> None:
    """The role switch shared by the in-process strategies, as timed phases.

    Leaving replicas release their engines (`rollout_release`), arriving trainers and new
    rollout replicas switch role on the same actors, then every worker binds the target split's
    groups through the worker method `bind` (built now, or cached and prewarmed) and the
    trainers take their new ranks; `runtime.roles` becomes `target`.
    """
    old = runtime.roles
    version = runtime.weights_version
    new_trainers = target.arriving_trainers(old)
    new_replicas = tuple(w for w in target.rollout_ids if w not in old.rollout_ids)
    leaving_replicas = tuple(w for w in old.rollout_ids if w not in target.rollout_ids)
    with log.phase(PhaseName.ROLLOUT_RELEASE):
        runtime.call(leaving_replicas, LiveWorker.release_rollout_engine).wait(
            "releasing rollout engines"
        )
    with log.phase(PhaseName.WORKER_REINIT):
        runtime.call(
            new_trainers, LiveWorker.set_role, role=Role.TRAIN, weights_version=version
        ).wait("becoming a trainer")
    with log.phase(PhaseName.ROLLOUT_REINIT):
        runtime.call(
            new_replicas, LiveWorker.set_role, role=Role.ROLLOUT, weights_version=version
        ).wait("becoming a rollout replica")
    with log.phase(PhaseName.COMM_PREWARM) as extra:
        bound = runtime.call(runtime.all_ids, bind, roles=target).wait(bind_doing)
        extra["comm_cache_hits"], extra["comm_groups_built"] = cache_use(bound.values())
        runtime.roles = target
        runtime.call(target.trainer_ids, LiveWorker.bind_trainer_rank).wait("binding trainer ranks")


def cache_use(answers: Iterable[object]) -> tuple[int | None, int | None]:
    """(groups taken from the communicator cache, groups built) of one bind, as every worker
    reported it (each binds the same groups); (None, None) when the bind reports neither."""
    reports = [a for a in answers if isinstance(a, dict) and "built_on_bind" in a]
    if not reports:
        return None, None
    built = max(int(r["built_on_bind"]) for r in reports)
    hits = min(int(r.get("cache_hits", 0)) for r in reports)
    return hits, built


def restore_weights_from_host(
    runtime: Runtime,
    *,
    old: RoleMap,
    target: RoleMap,
    numel: int,
    shard_refs: dict[int, ObjectRef[ShardState]],
) -> int:
    """Each new trainer re-cuts its master slice from the exported old slices; bytes fetched."""
    old_layout = ShardLayout(numel=numel, num_ranks=old.num_trainers)
    new_layout = ShardLayout(numel=numel, num_ranks=target.num_trainers)
    calls = runtime.call_each(
        runtime.call(
            [w],
            HostSyncWorkerSide.restore_weights,
            old_shard_refs=[
                shard_refs[r] for r in sources_of(old_layout, new_layout, target.trainer_rank(w))
            ],
        )
        for w in target.trainer_ids
    )
    restored = calls.wait("restoring weights")
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
            runtime, log, target=target, bind=LiveWorker.bind_groups, bind_doing="building groups"
        )

        first = target.trainer_ids[0]
        numel = runtime.call([first], LiveWorker.trainer_numel).wait("sizing")[first]
        with log.phase(PhaseName.WEIGHT_RESTORE) as extra:
            extra["bytes_moved"] = restore_weights_from_host(
                runtime, old=old, target=target, numel=numel, shard_refs=shard_refs
            )
            runtime.call(target.trainer_ids, LiveWorker.refresh_model_from_master).wait(
                "gathering weights"
            )
        with log.phase(PhaseName.OPTIMIZER_RESTORE):
            runtime.call(target.trainer_ids, LiveWorker.restore_optimizer).wait(
                "restoring optimizer"
            )
        with log.phase(PhaseName.WEIGHT_SYNC) as extra:
            sizes = runtime.call(
                target.sync_ids, LiveWorker.sync_weights, weights_version=version
            ).wait("syncing weights")
            extra["bytes_moved"] = int(sizes[target.trainer_ids[0]]["bytes"])
        with log.phase(PhaseName.POSTPROCESS):
            del shard_refs
            runtime.call(runtime.all_ids, HostSyncWorkerSide.drop_stash).wait(
                "releasing exported state"
            )
        return log.phases


IN_PROCESS_SETUP_PARTS = (SetupPart.ROLES_TAKEN, SetupPart.FIRST_WEIGHT_SYNC)
"""What an in-process resize repeats of the setup: roles taken (groups, trainer state, rollout
engines) and a weight sync; the actors, the world group and the models are kept."""

HOST_SYNC = Strategy(
    driver=HostSyncStrategy,
    worker=HostSyncWorkerSide,
    phases=(
        PhaseName.STATE_EXPORT,
        PhaseName.ROLLOUT_RELEASE,
        PhaseName.WORKER_REINIT,
        PhaseName.ROLLOUT_REINIT,
        PhaseName.COMM_PREWARM,
        PhaseName.WEIGHT_RESTORE,
        PhaseName.OPTIMIZER_RESTORE,
        PhaseName.WEIGHT_SYNC,
        PhaseName.POSTPROCESS,
    ),
    setup_parts=IN_PROCESS_SETUP_PARTS,
)
