"""One member of a weight sync on one node, in a process of its own, for
tests/executor/test_device_weight_paths_gpu.py.

    python tests/executor/device_sync_member.py RANK WORLD STORE_FILE OUT_JSON

Rank 0 is the first trainer: it publishes three weights versions (new random values each) from
its GPU. Every other rank is a replica whose "engine" keeps a host copy of what it loaded; a
replica started with CUDA_VISIBLE_DEVICES empty cannot see the trainer's device, so it cannot map
its buffer. Each member writes, per version, its sync result and the SHA-256 of the weights it
sent or loaded, plus how many mapping attempts it made.
"""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from dynaresize.executor.rl.weights_digest import weights_digest
from dynaresize.executor.worker.device_weights import DeviceWeightSync, sync_on_device

SHAPES = ((512, 96), (96,), (300, 17))
NUM_VERSIONS = 3


def sha256(flat: torch.Tensor) -> str:
    host = flat.detach().to("cpu").contiguous().view(torch.uint8)
    return hashlib.sha256(host.numpy().tobytes()).hexdigest()


def join_group(rank: int, world: int, store_file: str) -> None:
    """Join a gloo group of `world` processes of this machine through a file."""
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store_file}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=180),
    )


def main(rank: int, world: int, store_file: str, out: Path) -> None:
    join_group(rank, world, store_file)
    group = dist.new_group(list(range(world)))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    params = [torch.zeros(shape, dtype=torch.bfloat16, device=device) for shape in SHAPES]
    sync = DeviceWeightSync()
    versions = []
    for version in range(1, NUM_VERSIONS + 1):
        if rank == 0:
            generator = torch.Generator(device=device).manual_seed(version)
            for p in params:
                p.copy_(torch.randn(p.shape, generator=generator, device=device))
        loaded: dict[str, str] = {}

        def load(flat: torch.Tensor, loaded: dict[str, str] = loaded) -> str:
            loaded["sha256"] = sha256(flat)
            return weights_digest(flat)

        result = sync_on_device(
            sync, worker_id=rank, model_parameters=params, source=0, group=group, load=load
        )
        sent = sha256(torch.cat([p.reshape(-1) for p in params])) if rank == 0 else None
        versions.append({"result": result, "sha256": sent or loaded.get("sha256")})
    attempts = sync.paths.attempts
    if rank != 0:
        del sync  # a replica lets go of the trainer's buffer before the trainer may exit
    dist.barrier(group=group)
    out.write_text(
        json.dumps(
            {
                "rank": rank,
                "sees_cuda": torch.cuda.is_available(),
                "attempts": attempts,
                "versions": versions,
            }
        )
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))
