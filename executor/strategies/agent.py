"""Worker-side half of the fast resize strategies, mixed into the live worker.

The driver-side strategies (`overlapped`, `stop_and_rebuild`) call these methods through Ray. They
rely on what every live worker has: `worker_id`, `device`, `model`, `trainer` (a `TrainerRole` or
None), `roles`, `train_group`, `sync_group`, and the methods `set_role`, `bind_trainer_rank`.

What lives here:
- the worker's staging pool and sender (bounded host staging), created once;
- its communicator cache (every candidate's groups, prewarmed in a background thread);
- the old shard it keeps referenced while its slices stream out (no copy is taken);
- the background half of a resize: sends of optimizer state and the deferred load that the first
  optimizer step waits for;
- checkpoint files for the stop-and-rebuild baseline.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dynaresize.policies.types import Allocation

from ..comm_cache import CommunicatorCache, GroupKind
from ..deferred_optimizer import DeferredOptimizerState
from ..roles import RoleMap
from ..shards import OPTIMIZER_TENSORS, ShardLayout, ShardState, recut, sources_of
from ..staging import StagingConfig, StagingPool, StagingSender
from .plan import SliceMove

MOMENT_KEYS = OPTIMIZER_TENSORS


@dataclass
class HeldShard:
    """An old trainer's slice, kept referenced (not copied) until its bytes have left."""

    master: torch.Tensor
    moments: dict[str, torch.Tensor]
    optimizer_step: int

    @property
    def nbytes(self) -> int:
        tensors = [self.master, *self.moments.values()]
        return sum(t.numel() * t.element_size() for t in tensors)


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


def _fsync_save(obj: Any, path: Path) -> int:
    torch.save(obj, path)
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())
    return path.stat().st_size


class FastResizeWorker:
    """Mixin for the live worker class."""

    # --- setup ---------------------------------------------------------------------------

    def fast_setup(
        self,
        *,
        candidates: list[str],
        chunk_bytes: int,
        num_buffers: int,
        pin_memory: bool,
        reuse_communicators: bool,
        world_size: int,
    ) -> str:
        """Create the staging pool and the communicator cache; returns the pool's name."""
        config = StagingConfig(
            chunk_bytes=chunk_bytes, num_buffers=num_buffers, pin_memory=pin_memory
        )
        self._staging_pool = StagingPool(config, device=self.device)
        self._staging_sender = StagingSender(config, device=self.device)
        self._comm_cache = CommunicatorCache(
            rank=self.worker_id,
            world_size=world_size,
            candidates=[Allocation.parse(c) for c in candidates],
            reuse=reuse_communicators,
        )
        self._held: HeldShard | None = None
        self._background: BackgroundWork | None = None
        return self._staging_pool.name

    def fast_connect(self, *, pools: dict[int, str]) -> None:
        """Map and pin every peer's pool now, so that no resize pays for it."""
        for worker_id, name in pools.items():
            if worker_id != self.worker_id:
                self._staging_sender.attach(name)

    def fast_prewarm(self) -> None:
        """Start building every candidate's groups in the background (every worker calls it)."""
        self._comm_cache.start_prewarm()

    def fast_bind(self, *, roles: RoleMap) -> dict[str, float]:
        """Take `roles`' groups from the cache (or build them, when reuse is off)."""
        bound = self._comm_cache.bind(roles.allocation)
        self.train_group = bound.group(GroupKind.TRAIN_DP)
        self.sync_group = bound.group(GroupKind.WEIGHT_SYNC)
        self.roles = roles
        return {"waited_s": bound.waited_s, "built_on_bind": float(bound.built_on_bind)}

    def fast_close(self) -> None:
        self.fast_settle()
        self._comm_cache.wait_prewarmed()
        self._staging_sender.close()
        self._staging_pool.close()

    # --- state export --------------------------------------------------------------------

    def fast_hold_shard(self) -> int:
        """Keep this trainer's current slice referenced for the move; returns its bytes."""
        trainer = self.trainer
        assert trainer is not None and trainer.master is not None and trainer.optimizer is not None
        state = trainer.optimizer.state.get(trainer.master, {})
        moments = {
            k: state[k].detach() if k in state else torch.zeros_like(trainer.master.detach())
            for k in MOMENT_KEYS
        }
        self._held = HeldShard(trainer.master.detach(), moments, trainer.optimizer_step)
        return self._held.nbytes

    # --- moving slices -------------------------------------------------------------------

    def _start_sends(
        self,
        moves: list[SliceMove],
        pools: dict[int, str],
        transfer_ids: dict[int, int],
        pick: dict[str, torch.Tensor],
        work: BackgroundWork | None,
    ) -> tuple[list[threading.Thread], list[BaseException], list[int]]:
        """One thread per destination worker, each streaming its slices in plan order."""
        by_dst: dict[int, list[int]] = {}
        for index, move in enumerate(moves):
            if move.src_worker == self.worker_id and not move.local:
                by_dst.setdefault(move.dst_worker, []).append(index)
        errors: list[BaseException] = []
        sent: list[int] = []

        def run(indices: list[int]) -> None:
            try:
                for index in indices:
                    move = moves[index]
                    tensors = {
                        k: t[move.src_start : move.src_start + move.numel] for k, t in pick.items()
                    }
                    stats = self._staging_sender.send(
                        pools[move.dst_worker],
                        tensors,
                        transfer_id=transfer_ids[index],
                        sender_id=self.worker_id,
                    )
                    sent.append(stats.num_bytes)
                if work is not None:
                    work.mark_finished()
            except BaseException as exc:  # surfaced by the caller
                errors.append(exc)

        threads = [
            threading.Thread(target=run, args=(idx,), name=f"stage-send-{dst}", daemon=True)
            for dst, idx in by_dst.items()
        ]
        for thread in threads:
            thread.start()
        return threads, errors, sent

    def _receive_slices(
        self,
        moves: list[SliceMove],
        transfer_ids: dict[int, int],
        into: dict[str, torch.Tensor],
        pick_local: dict[str, torch.Tensor] | None,
    ) -> int:
        """Fill this worker's new slice: local overlaps by a device copy, the rest staged."""
        received = 0
        for index, move in enumerate(moves):
            if move.dst_worker != self.worker_id:
                continue
            views = {k: t[move.dst_start : move.dst_start + move.numel] for k, t in into.items()}
            if move.local:
                assert pick_local is not None
                for key, view in views.items():
                    start = move.src_start
                    view.copy_(pick_local[key][start : start + move.numel])
                continue
            stats = self._staging_pool.receive_into(
                views, transfer_id=transfer_ids[index], sender_id=move.src_worker
            )
            received += stats.num_bytes
        return received

    def _pick(self, keys: tuple[str, ...]) -> dict[str, torch.Tensor] | None:
        if self._held is None:
            return None
        table = {"master": self._held.master, **self._held.moments}
        return {k: table[k] for k in keys}

    def fast_move_weights(
        self,
        *,
        moves: list[SliceMove],
        pools: dict[int, str],
        transfer_base: int,
        optimizer_step: int,
    ) -> dict[str, float]:
        """Critical path: every new trainer gets the fp32 master of its slice, staged."""
        ids = {i: transfer_base + 2 * i for i in range(len(moves))}
        source = self._pick(("master",))
        threads, errors, sent = (
            self._start_sends(moves, pools, ids, source, None) if source else ([], [], [])
        )
        received = 0
        if self.trainer is not None and self.worker_id in {m.dst_worker for m in moves}:
            trainer = self.trainer
            master = torch.empty(
                trainer.layout.shard_numel(trainer.rank), dtype=torch.float32, device=self.device
            )
            received = self._receive_slices(moves, ids, {"master": master}, source)
            trainer.load_weights(master, optimizer_step=optimizer_step)
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return {"sent": float(sum(sent)), "received": float(received)}

    def fast_move_moments(
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
        source = self._pick(MOMENT_KEYS) if optimizer_step > 0 else None
        work = BackgroundWork(started_wall=started_wall) if deferred else None
        threads, errors, sent = (
            self._start_sends(moves, pools, ids, source, work) if source else ([], [], [])
        )
        receives = self.trainer is not None and self.worker_id in {m.dst_worker for m in moves}
        received = 0.0
        if receives and optimizer_step > 0:
            trainer = self.trainer
            numel = trainer.layout.shard_numel(trainer.rank)

            def load() -> dict:
                moments = {
                    k: torch.empty(numel, dtype=torch.float32, device=self.device)
                    for k in MOMENT_KEYS
                }
                got = self._receive_slices(moves, ids, moments, source)
                if work is not None:
                    work.bytes_received += got
                    work.mark_finished()
                state: dict[str, Any] = dict(moments)
                state["step"] = torch.tensor(float(optimizer_step))
                return {trainer.master: state}

            if deferred:
                assert work is not None
                work.deferred = DeferredOptimizerState(
                    trainer.optimizer, load, name=f"moments of trainer {self.worker_id}"
                )
                self._guard_exports(work.deferred)
            else:
                loaded = load()
                trainer.optimizer.state[trainer.master] = loaded[trainer.master]
                received = float(sum(_bytes(v) for v in moments_of(loaded)))
        if work is not None:
            work.threads = threads
            work.errors = errors
            self._background = work
            return {"sent": 0.0, "received": 0.0}
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        self._held = None
        return {"sent": float(sum(sent)), "received": received}

    def fast_defer_host_moments(self, *, optimizer_step: int) -> None:
        """Without staging: the moments fetched to host by `restore_weights` reach the device in
        the background, and the first optimizer step waits for them."""
        trainer = self.trainer
        assert trainer is not None
        pending = self._pending_moments
        self._pending_moments = {}
        work = BackgroundWork(started_wall=time.time())
        if optimizer_step > 0:

            def load() -> dict:
                state: dict[str, Any] = {
                    k: pending[k].to(self.device, dtype=torch.float32, copy=True)
                    for k in MOMENT_KEYS
                }
                state["step"] = torch.tensor(float(optimizer_step))
                work.bytes_received += sum(_bytes(pending[k]) for k in MOMENT_KEYS)
                work.mark_finished()
                return {trainer.master: state}

            work.deferred = DeferredOptimizerState(
                trainer.optimizer, load, name=f"moments of trainer {self.worker_id}"
            )
            self._guard_exports(work.deferred)
        self._background = work

    def _guard_exports(self, deferred: DeferredOptimizerState) -> None:
        """A checkpoint taken before the first step must see the migrated moments too."""
        trainer = self.trainer
        original = type(trainer).export_shard

        def export_after_install():
            deferred.wait_and_install()
            return original(trainer)

        trainer.export_shard = export_after_install

    def fast_settle(self) -> dict[str, float] | None:
        """Finish this worker's background work of the last resize; report when it ended."""
        work = getattr(self, "_background", None)
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

    # --- stop and rebuild: checkpoint through disk ---------------------------------------

    def disk_save(self, *, directory: str) -> dict[str, float]:
        """Write this trainer's slice (and, on rank 0, the model) to disk, synced."""
        started = time.perf_counter()
        trainer = self.trainer
        assert trainer is not None
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        shard = trainer.export_shard()
        written = _fsync_save(
            {
                "master": shard.master,
                **shard.moments,
                "optimizer_step": shard.optimizer_step,
                "num_ranks": shard.layout.num_ranks,
            },
            folder / f"shard-{trainer.rank}.pt",
        )
        if trainer.rank == 0:
            weights = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
            written += _fsync_save(weights, folder / "model.pt")
        return {"bytes": float(written), "s": time.perf_counter() - started}

    def disk_load_model(self, *, directory: str) -> int:
        """Load the checkpointed model weights into this (new) worker's model."""
        state = torch.load(Path(directory) / "model.pt", mmap=True, weights_only=True)
        self.model.load_state_dict(state)
        return sum(_bytes(t) for t in state.values())

    def disk_restore_weights(self, *, directory: str, old_num_ranks: int) -> int:
        """This new trainer's master slice, re-cut from the old slices on disk."""
        trainer = self.trainer
        assert trainer is not None
        old = ShardLayout(numel=trainer.layout.numel, num_ranks=old_num_ranks)
        old_shards = []
        for rank in sources_of(old, trainer.layout, trainer.rank):
            saved = torch.load(Path(directory) / f"shard-{rank}.pt", mmap=True, weights_only=True)
            old_shards.append(
                ShardState(
                    rank=rank,
                    layout=old,
                    master=saved["master"],
                    moments={k: saved[k] for k in MOMENT_KEYS},
                    optimizer_step=int(saved["optimizer_step"]),
                )
            )
        shard = recut(old_shards, trainer.layout, trainer.rank)
        trainer.load_weights(shard.master, optimizer_step=shard.optimizer_step)
        self._pending_moments = shard.moments
        return shard.nbytes()


def moments_of(loaded: dict) -> list[torch.Tensor]:
    return [v for state in loaded.values() for k, v in state.items() if k in MOMENT_KEYS]
