"""The worker side of the `overlapped` strategy, one of the live worker's method groups.

The driver side (`overlapped.OverlappedStrategy`) calls these methods on every worker through the
runtime. What lives here:
- the worker's staging pool and sender (bounded host staging), created once;
- its communicator cache (every candidate's groups, prewarmed in a background thread);
- the old shard it keeps referenced while its slices stream out (no copy is taken);
- the background half of a resize: sends of optimizer state and the deferred load that the first
  optimizer step waits for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from dynaresize.policies.types import Allocation
from dynaresize.traces.phases import PhaseName

from ..roles import RoleMap
from ..staging import StagingConfig, StagingPool, StagingSender
from ..staging.paths import TransferRoutes
from .comm_cache import CommunicatorCache, GroupKind
from .deferred_optimizer import DeferredOptimizerState, LoadedState
from .host_sync import HostSyncWorkerSide
from .routed import RoutedTransfers, Sends
from .shards import OPTIMIZER_TENSORS
from .slice_moves import SliceMove
from .trainer import TrainerRole

MOMENT_KEYS = OPTIMIZER_TENSORS


@dataclass
class HeldShard:
    """An old trainer's slice, kept referenced (not copied) until its bytes have left."""

    master: torch.Tensor
    moments: dict[str, torch.Tensor]
    optimizer_step: int

    @property
    def nbytes(self) -> int:
        return sum(_bytes(t) for t in (self.master, *self.moments.values()))

    def pick(self, keys: tuple[str, ...]) -> dict[str, torch.Tensor]:
        table = {"master": self.master, **self.moments}
        return {k: table[k] for k in keys}


@dataclass
class BackgroundWork:
    """The overlapped half of one resize on this worker."""

    started_wall: float
    threads: list[threading.Thread] = field(default_factory=list)
    deferred: DeferredOptimizerState | None = None
    errors: list[BaseException] = field(default_factory=list)
    bytes_received: int = 0
    finished_wall: float | None = None

    def mark_finished(self) -> None:
        self.finished_wall = max(self.finished_wall or 0.0, time.time())


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class OverlappedWorkerSide(RoutedTransfers, HostSyncWorkerSide):
    """Methods of the live worker that the overlapped strategy calls."""

    _staging_pool: StagingPool
    _staging_sender: StagingSender
    _comm_cache: CommunicatorCache
    _held: HeldShard | None = None
    _background: BackgroundWork | None = None

    # --- setup ---------------------------------------------------------------------------

    def open_staging(
        self,
        *,
        candidates: list[Allocation],
        staging: StagingConfig,
        reuse_communicators: bool,
        world_size: int,
        routes: TransferRoutes | None = None,
    ) -> str:
        """Create the staging pool, the wires `routes` needs (none: every move stays in shared
        memory) and the communicator cache; returns the pool's name."""
        self._staging_pool = StagingPool(staging, device=self.device)
        self._staging_sender = StagingSender(staging, device=self.device)
        self._open_routes(routes, staging, world_size=world_size)
        self._comm_cache = CommunicatorCache(
            rank=self.worker_id,
            world_size=world_size,
            candidates=candidates,
            reuse=reuse_communicators,
        )
        self._held = None
        self._background = None
        return self._staging_pool.name

    def attach_staging_pools(self, *, pools: dict[int, str]) -> None:
        """Map and pin every peer's pool on this node now, so that no resize pays for it."""
        for worker_id, name in pools.items():
            if worker_id != self.worker_id and self._reaches_by_shm(worker_id):
                self._staging_sender.attach(name)

    def prewarm_groups(self) -> None:
        """Start building every candidate's groups in the background (every worker calls it)."""
        self._comm_cache.start_prewarm()

    def bind_cached_groups(self, *, roles: RoleMap) -> dict[str, float]:
        """Take `roles`' groups from the cache (or build them, when reuse is off)."""
        bound = self._comm_cache.bind(roles.allocation)
        self.train_group = bound.group(GroupKind.TRAIN_DP)
        self.sync_group = bound.group(GroupKind.WEIGHT_SYNC)
        self.roles = roles
        return {
            "waited_s": bound.waited_s,
            "built_on_bind": float(bound.built_on_bind),
            "cache_hits": float(bound.cache_hits),
        }

    def close_staging(self) -> None:
        """Free the pool, the sender's mappings and the wires (the cached groups stay in use
        until `leave_world`)."""
        self.settle_background_moves()
        self._comm_cache.wait_prewarmed()
        self._staging_sender.close()
        self._staging_pool.close()
        self._close_routes()

    # --- state export --------------------------------------------------------------------

    def hold_shard(self) -> int:
        """Keep this trainer's current slice referenced for the move; returns its bytes."""
        trainer = self._trainer()
        master, optimizer = trainer.master_and_optimizer()
        state = optimizer.state.get(master, {})
        moments = {
            k: state[k].detach() if k in state else torch.zeros_like(master.detach())
            for k in MOMENT_KEYS
        }
        self._held = HeldShard(master.detach(), moments, trainer.optimizer_step)
        return self._held.nbytes

    # --- moving slices -------------------------------------------------------------------

    def _held_tensors(self, keys: tuple[str, ...]) -> dict[str, torch.Tensor] | None:
        return self._held.pick(keys) if self._held is not None else None

    def _receiving_trainer(self, moves: list[SliceMove]) -> TrainerRole | None:
        """This worker's trainer role when it receives slices in `moves`."""
        if self.trainer is not None and self.worker_id in {m.dst_worker for m in moves}:
            return self.trainer
        return None

    def move_master_slices(
        self,
        *,
        moves: list[SliceMove],
        pools: dict[int, str],
        transfer_base: int,
        optimizer_step: int,
    ) -> dict[str, float]:
        """Critical path: every new trainer gets the fp32 master of its slice, staged."""
        ids = {i: transfer_base + 2 * i for i in range(len(moves))}
        source = self._held_tensors(("master",))
        sends = self._start_sends(moves, pools, ids, source, None) if source else Sends()
        received = 0
        trainer = self._receiving_trainer(moves)
        if trainer is not None:
            master = torch.empty(
                trainer.layout.shard_numel(trainer.rank), dtype=torch.float32, device=self.device
            )
            received = self._receive_slices(
                moves, ids, {"master": master}, source, phase=PhaseName.WEIGHT_RESTORE
            )
            trainer.load_weights(master, optimizer_step=optimizer_step)
        sent = sends.join()
        return {"sent": float(sent), "received": float(received)}

    def move_moment_slices(
        self,
        *,
        moves: list[SliceMove],
        pools: dict[int, str],
        transfer_base: int,
        optimizer_step: int,
        deferred: bool,
    ) -> dict[str, float]:
        """AdamW moments of every new slice: now (critical) or in the background (deferred).

        Deferred: the receive runs in a thread and the trainer's first `optimizer.step()` waits
        for it (and installs it); sends run in threads too. This call then returns at once.
        """
        started_wall = time.time()
        ids = {i: transfer_base + 2 * i + 1 for i in range(len(moves))}
        # Before the first optimizer step there are no moments: nothing moves at all.
        source = self._held_tensors(MOMENT_KEYS) if optimizer_step > 0 else None
        work = BackgroundWork(started_wall=started_wall) if deferred else None
        on_sent = work.mark_finished if work is not None else None
        sends = self._start_sends(moves, pools, ids, source, on_sent) if source else Sends()
        trainer = self._receiving_trainer(moves)
        received = 0.0
        if trainer is not None and optimizer_step > 0:
            numel = trainer.layout.shard_numel(trainer.rank)
            master, optimizer = trainer.master_and_optimizer()

            def load() -> LoadedState:
                moments = {
                    k: torch.empty(numel, dtype=torch.float32, device=self.device)
                    for k in MOMENT_KEYS
                }
                got = self._receive_slices(
                    moves, ids, moments, source, phase=PhaseName.OPTIMIZER_RESTORE
                )
                if work is not None:
                    work.bytes_received += got
                    work.mark_finished()
                return {master: _adam_state(moments, optimizer_step)}

            if work is not None:
                work.deferred = self._defer(trainer, load)
            else:
                loaded = load()
                optimizer.state[master] = loaded[master]
                received = float(sum(_bytes(loaded[master][k]) for k in MOMENT_KEYS))
        if work is not None:
            work.threads, work.errors = sends.threads, sends.errors
            self._background = work
            return {"sent": 0.0, "received": 0.0}
        sent = sends.join()
        self._held = None
        return {"sent": float(sent), "received": received}

    def defer_host_moments(self, *, optimizer_step: int) -> None:
        """Without staging: the moments fetched to host by `restore_weights` reach the device in
        the background, and the first optimizer step waits for them."""
        trainer = self._trainer()
        pending = self._pending_moments
        self._pending_moments = {}
        work = BackgroundWork(started_wall=time.time())
        if optimizer_step > 0:
            master, _ = trainer.master_and_optimizer()

            def load() -> LoadedState:
                moments = {
                    k: pending[k].to(self.device, dtype=torch.float32, copy=True)
                    for k in MOMENT_KEYS
                }
                work.bytes_received += sum(_bytes(pending[k]) for k in MOMENT_KEYS)
                work.mark_finished()
                return {master: _adam_state(moments, optimizer_step)}

            work.deferred = self._defer(trainer, load)
        self._background = work

    def _defer(
        self, trainer: TrainerRole, load: Callable[[], LoadedState]
    ) -> DeferredOptimizerState:
        """Load the moments in the background; the first optimizer step, and any checkpoint
        export before it, wait for them."""
        _, optimizer = trainer.master_and_optimizer()
        deferred = DeferredOptimizerState(
            optimizer, load, name=f"moments of trainer {self.worker_id}"
        )
        trainer.deferred_moments = deferred
        return deferred

    def background_finished(self) -> bool:
        """Whether this worker's background work of the last resize has ended (sends sent,
        moments loaded): settling it then waits for nothing."""
        work = self._background
        if work is None:
            return True
        if any(thread.is_alive() for thread in work.threads):
            return False
        return work.deferred is None or work.deferred.done

    def settle_background_moves(self) -> dict[str, float] | None:
        """Finish this worker's background work of the last resize; report when it ended."""
        work = self._background
        if work is None:
            return None
        for thread in work.threads:
            thread.join()
        waited = 0.0
        if work.deferred is not None:
            work.deferred.wait_and_install()
            waited = work.deferred.waited_s
        if work.errors:
            raise work.errors[0]
        self._background = None
        self._held = None
        if self.device.type == "cuda":
            # The old slice and the move's buffers are free now; a worker that kept its role
            # would otherwise keep their blocks cached, out of reach of the roles that share
            # its device.
            torch.cuda.empty_cache()
        finished = work.finished_wall if work.finished_wall is not None else time.time()
        return {
            "started_wall": work.started_wall,
            "finished_wall": finished,
            "bytes_received": float(work.bytes_received),
            "step_waited_s": waited,
        }


def _adam_state(moments: dict[str, torch.Tensor], optimizer_step: int) -> dict[str, Any]:
    """AdamW's per-parameter state: the moments and the step count they belong to (on the
    moments' device, where the trainer's fused update wants it)."""
    state: dict[str, Any] = dict(moments)
    device = next(iter(moments.values())).device if moments else None
    state["step"] = torch.tensor(float(optimizer_step), device=device)
    return state
