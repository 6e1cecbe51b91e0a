"""The worker side of the `stop_and_rebuild` baseline: its checkpoint through disk.

An old trainer writes its slice (and rank 0 the model) to files, synced; every new worker loads
the model back and each new trainer re-cuts its slice from the old slices on disk. The moments
wait in `_pending_moments` for the optimizer restore, as after a host_sync weight restore.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

from .shards import OPTIMIZER_TENSORS, ShardLayout, ShardState, recut, sources_of
from .state import WorkerState

MODEL_FILE = "model.pt"


def shard_file(rank: int) -> str:
    return f"shard-{rank}.pt"


def _fsync_save(obj: Any, path: Path) -> int:
    """Write with torch.save and force the bytes onto the disk; returns the file's size."""
    torch.save(obj, path)
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())
    return path.stat().st_size


class StopAndRebuildWorkerSide(WorkerState):
    """Methods of the live worker that the stop-and-rebuild strategy calls."""

    def save_state_to_disk(self, *, directory: str) -> dict[str, float]:
        """Write this trainer's slice (and, on rank 0, the model) to disk, synced."""
        started = time.perf_counter()
        trainer = self._trainer()
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
            folder / shard_file(trainer.rank),
        )
        if trainer.rank == 0:
            weights = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
            written += _fsync_save(weights, folder / MODEL_FILE)
        return {"bytes": float(written), "s": time.perf_counter() - started}

    def load_model_from_disk(self, *, directory: str) -> int:
        """Load the checkpointed model weights into this (new) worker's model; bytes read."""
        state = torch.load(Path(directory) / MODEL_FILE, mmap=True, weights_only=True)
        self.model.load_state_dict(state)
        return sum(t.numel() * t.element_size() for t in state.values())

    def restore_weights_from_disk(self, *, directory: str, old_num_ranks: int) -> int:
        """This new trainer's master slice, re-cut from the old slices on disk; bytes read."""
        trainer = self._trainer()
        old = ShardLayout(numel=trainer.layout.numel, num_ranks=old_num_ranks)
        old_shards = []
        for rank in sources_of(old, trainer.layout, trainer.rank):
            saved = torch.load(Path(directory) / shard_file(rank), mmap=True, weights_only=True)
            old_shards.append(
                ShardState(
                    rank=rank,
                    layout=old,
                    master=saved["master"],
                    moments={k: saved[k] for k in OPTIMIZER_TENSORS},
                    optimizer_step=int(saved["optimizer_step"]),
                )
            )
        shard = recut(old_shards, trainer.layout, trainer.rank)
        trainer.load_weights(shard.master, optimizer_step=shard.optimizer_step)
        self._pending_moments = shard.moments
        return shard.nbytes()
