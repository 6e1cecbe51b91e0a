"""The worker half of `host_sync`: trainer slices through host memory (the Ray object store).

An old trainer puts a host copy of its ZeRO-1 slice in the object store (`stash_shard`) and
hands the driver a reference; each new trainer fetches the old slices its own overlaps and re-cuts
its master slice from them (`restore_weights`), keeping the moments aside for the optimizer
restore (`LiveWorker.restore_optimizer`). The overlapped strategy takes this path too when its
staging is switched off, so its worker half builds on this one.
"""

from __future__ import annotations

import ray
from ray import ObjectRef

from .shards import ShardState, recut
from .state import WorkerState


class HostSyncWorkerSide(WorkerState):
    """Methods of the live worker that the host_sync strategy calls."""

    _stash: ObjectRef[ShardState] | None = None
    """This trainer's exported slice in the object store, until dropped."""

    def stash_shard(self) -> tuple[list[ObjectRef[ShardState]], int]:
        """Copy this rank's slice to host memory (the object store) and return a reference.

        The reference comes back inside a list so that the driver passes it on without
        fetching the state itself; the receivers fetch what they need.
        """
        shard = self._trainer().export_shard()
        self._stash = ray.put(shard)
        return [self._stash], shard.nbytes()

    def drop_stash(self) -> None:
        self._stash = None

    def restore_weights(self, *, old_shard_refs: list[ObjectRef[ShardState]]) -> int:
        """Take this rank's master slice, re-cut from the old ranks' slices (host memory).

        Returns the bytes fetched. The moments are kept aside for restore_optimizer.
        """
        old_shards: list[ShardState] = ray.get(old_shard_refs)
        trainer = self._trainer()
        shard = recut(old_shards, trainer.layout, trainer.rank)
        trainer.load_weights(shard.master, optimizer_step=shard.optimizer_step)
        self._pending_moments = shard.moments
        return sum(s.nbytes() for s in old_shards)
