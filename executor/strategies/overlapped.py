"""`overlapped`: a resize that keeps the actors and moves only what the next step needs.

Each of the three mechanisms is a switch, so each can be measured alone:
- reuse_communicators: every candidate split's groups are built and warmed in the background
  from the first step on; the resize binds them (off: they are built at the resize);
- staging: trainer slices stream between workers through each receiver's bounded, pinned host
  pool, no copy of the state is taken (off: each old trainer puts a full host copy of its slice in
  the object store and the new trainers fetch what they need, as `host_sync` does);
- defer_optimizer: the AdamW moments move after the boundary, overlapped with the first step,
  whose optimizer update waits for them (off: they move on the critical path).

With all three off this is `host_sync` minus its unconditional weight sync: replicas already hold
the current weights (they are synced after every step, and a leaving trainer has them too).
"""

from __future__ import annotations

import time

from dynaresize.traces.phases import PhaseName, StrategyName

from ..cluster.runtime import Runtime
from ..config import OverlappedMechanisms
from ..roles import RoleMap
from ..staging import MIB, StagingConfig
from ..staging.paths import TransferRoutes, TransferStat
from ..worker.actor import LiveWorker
from ..worker.host_sync import HostSyncWorkerSide
from ..worker.overlapped import OverlappedWorkerSide
from ..worker.slice_moves import reshard_moves, staged_bytes
from .host_sync import (
    HOST_SYNC,
    IN_PROCESS_SETUP_PARTS,
    export_shards_to_host,
    restore_weights_from_host,
    switch_roles_and_bind,
)
from .strategy import PhaseLog, PhaseTiming, ResizeStrategy, Strategy

FP32_BYTES = 4


class OverlappedStrategy(ResizeStrategy):
    name = StrategyName.OVERLAPPED

    def __init__(self, mechanisms: OverlappedMechanisms | None = None) -> None:
        """`mechanisms`: the run config's `overlapped` section when None."""
        self._mechanisms = mechanisms
        self._pools: dict[int, str] = {}
        self._ready = False
        self._transfers = 0
        self._background_workers: tuple[int, ...] = ()
        self._background_phases: list[PhaseTiming] = []
        self.routes: TransferRoutes | None = None
        """The node of every worker and the path of every move (set by `prepare`)."""

    # --- setup and hooks -----------------------------------------------------------------

    def mechanisms(self, runtime: Runtime) -> OverlappedMechanisms:
        if self._mechanisms is None:
            self._mechanisms = runtime.config.overlapped
        return self._mechanisms

    def prepare(self, runtime: Runtime) -> None:
        """Pools and communicator caches on every worker; prewarm starts right away."""
        if self._ready:
            return
        mech = self.mechanisms(runtime)
        settings = runtime.config.staging
        self.routes = locate_workers(runtime)
        names = runtime.call(
            runtime.all_ids,
            OverlappedWorkerSide.open_staging,
            candidates=list(runtime.config.candidates),
            staging=StagingConfig(
                chunk_bytes=settings.chunk_mib * MIB,
                num_buffers=settings.num_buffers,
                pin_memory=settings.pin_memory,
            ),
            reuse_communicators=mech.reuse_communicators,
            world_size=len(runtime.workers),
            routes=self.routes,
        ).wait("creating staging pools")
        self._pools = dict(names)
        runtime.call(
            runtime.all_ids, OverlappedWorkerSide.attach_staging_pools, pools=self._pools
        ).wait("attaching pools")
        if mech.reuse_communicators:
            runtime.call(runtime.all_ids, OverlappedWorkerSide.prewarm_groups).wait(
                "prewarming groups"
            )
        self._ready = True

    def before_train(self, runtime: Runtime) -> None:
        """Before the first step on a new split: settle the last resize's background moves if
        they have all landed already (in the sync pipeline they land while the batch is
        generated). Settling drops the old slices the senders held and returns the moves'
        blocks to the device, so that the first step finds the memory every later step finds
        on a device the roles share, rather than with the resize's leftovers still held."""
        self.prepare(runtime)
        if self._background_workers:
            finished = runtime.call(
                self._background_workers, OverlappedWorkerSide.background_finished
            ).wait("asking whether background moves ended")
            if all(finished.values()):
                self.after_step(runtime)

    def after_step(self, runtime: Runtime) -> None:
        """After the first step on a new split: collect when the background work ended."""
        if not self._background_workers:
            return
        reports = runtime.call(
            self._background_workers, OverlappedWorkerSide.settle_background_moves
        ).wait("finishing background state moves")
        self._background_workers = ()
        done = [r for r in reports.values() if r is not None]
        transfers = take_transfers(runtime, tuple(reports))
        if not done:
            return
        now_clock, now_wall = runtime.clock(), time.time()
        start = min(r["started_wall"] for r in done)
        end = max(r["finished_wall"] for r in done)
        self._background_phases.append(
            PhaseTiming(
                phase=PhaseName.OPTIMIZER_RESTORE,
                start_s=max(now_clock - (now_wall - start), 0.0),
                end_s=max(now_clock - (now_wall - end), 0.0),
                critical=False,
                bytes_moved=int(sum(r["bytes_received"] for r in done)),
                transfers=transfers,
            )
        )

    def release(self, runtime: Runtime) -> None:
        """Finish background work and free every worker's pool (before another strategy runs)."""
        if not self._ready:
            return
        self.after_step(runtime)
        runtime.call(runtime.all_ids, OverlappedWorkerSide.close_staging).wait(
            "closing staging pools"
        )
        self._ready = False

    def pop_background_phases(self) -> list[PhaseTiming]:
        """Background phases that ended since the last call (the driver records them)."""
        phases, self._background_phases = self._background_phases, []
        return phases

    # --- the resize ----------------------------------------------------------------------

    def resize(self, runtime: Runtime, *, target: RoleMap) -> list[PhaseTiming]:
        self.prepare(runtime)
        if self._background_workers:  # a resize right after a resize: finish the last one first
            self.after_step(runtime)
        mech = self.mechanisms(runtime)
        old = runtime.roles
        log = PhaseLog(runtime)
        version = runtime.weights_version
        first = old.trainer_ids[0]
        numel = runtime.call([first], LiveWorker.trainer_numel).wait("sizing")[first]
        moves = reshard_moves(old, target, numel=numel)
        involved = tuple(sorted(set(old.trainer_ids) | set(target.trainer_ids)))

        shard_refs = None
        with log.phase(PhaseName.STATE_EXPORT) as extra:
            if mech.staging:
                held = runtime.call(old.trainer_ids, OverlappedWorkerSide.hold_shard).wait(
                    "holding shards"
                )
                extra["bytes_moved"] = 0  # referenced in place: nothing is copied
                del held
            else:
                shard_refs, extra["bytes_moved"] = export_shards_to_host(runtime, old)
        switch_roles_and_bind(
            runtime,
            log,
            target=target,
            bind=OverlappedWorkerSide.bind_cached_groups,
            bind_doing="binding groups",
        )

        step = version  # AdamW steps applied so far
        with log.phase(PhaseName.WEIGHT_RESTORE) as extra:
            if mech.staging:
                runtime.call(
                    involved,
                    OverlappedWorkerSide.move_master_slices,
                    moves=moves,
                    pools=self._pools,
                    transfer_base=self._next_transfer_ids(len(moves)),
                    optimizer_step=step,
                ).wait("moving master slices")
                extra["bytes_moved"] = staged_bytes(moves, bytes_per_element=FP32_BYTES)
                extra["transfers"] = take_transfers(runtime, involved)
            else:
                assert shard_refs is not None
                extra["bytes_moved"] = restore_weights_from_host(
                    runtime, old=old, target=target, numel=numel, shard_refs=shard_refs
                )

        critical_moments = not mech.defer_optimizer
        with log.phase(PhaseName.OPTIMIZER_RESTORE, critical=True) as extra:
            if mech.staging:
                runtime.call(
                    involved,
                    OverlappedWorkerSide.move_moment_slices,
                    moves=moves,
                    pools=self._pools,
                    transfer_base=self._next_transfer_ids(len(moves)),
                    optimizer_step=step,
                    deferred=mech.defer_optimizer,
                ).wait("moving optimizer moments")
                if critical_moments:
                    extra["bytes_moved"] = 2 * staged_bytes(moves, bytes_per_element=FP32_BYTES)
                    extra["transfers"] = take_transfers(runtime, involved)
            elif mech.defer_optimizer:
                runtime.call(
                    target.trainer_ids, OverlappedWorkerSide.defer_host_moments, optimizer_step=step
                ).wait("deferring moments")
            else:
                runtime.call(target.trainer_ids, LiveWorker.restore_optimizer).wait(
                    "restoring optimizer"
                )
        if mech.defer_optimizer:
            self._background_workers = involved if mech.staging else target.trainer_ids

        if shard_refs is not None:
            with log.phase(PhaseName.POSTPROCESS):
                del shard_refs
                runtime.call(runtime.all_ids, HostSyncWorkerSide.drop_stash).wait(
                    "releasing exported state"
                )
        return log.phases

    def _next_transfer_ids(self, count: int) -> int:
        """A fresh block of transfer ids for one staged move of `count` slices."""
        base = self._transfers
        self._transfers += 2 * count + 2
        return base


def locate_workers(runtime: Runtime) -> TransferRoutes:
    """The node of every worker (asked once, when the pools open) and the run's device setting:
    what decides the path of every move."""
    infos = runtime.call(runtime.all_ids, LiveWorker.info).wait("locating workers")
    return TransferRoutes(
        node_of_worker=tuple(str(infos[w]["node_id"]) for w in runtime.all_ids),
        device_transfers=runtime.config.device_transfers,
    )


def take_transfers(runtime: Runtime, worker_ids: tuple[int, ...]) -> tuple[TransferStat, ...]:
    """The transfers the workers received since the last call, in worker order."""
    logs = runtime.call(worker_ids, OverlappedWorkerSide.take_transfer_log).wait(
        "collecting transfers"
    )
    return tuple(stat for w in sorted(logs) for stat in logs[w])


OVERLAPPED = Strategy(
    driver=OverlappedStrategy,
    worker=OverlappedWorkerSide,
    # host_sync's phases without its weight sync: the replicas hold the current weights already
    phases=tuple(p for p in HOST_SYNC.phases if p is not PhaseName.WEIGHT_SYNC),
    setup_parts=IN_PROCESS_SETUP_PARTS,
)
