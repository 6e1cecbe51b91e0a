"""Ranks of one trainer group on one GPU, exchanging vectors on the group's collective paths.

The CUDA test and the benchmark of the same-device collectives start the ranks here (plain
processes joined by a gloo group through a file; no Ray, no model): each rank fills a vector from
its own seed, all-reduces it on the ipc path (`worker.same_device`) and on the host path (gloo over
host copies), all-gathers one chunk per rank on both, and times repeated calls of each. The
results come back on the host, so a test can compare them with sums it makes itself.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..worker.collectives import CollectivePath, PathChoice, TrainerCollectives, choose_path
from ..worker.shards import ShardLayout
from .trainer_ranks import spawn_ranks


@dataclass(frozen=True)
class ExchangeJob:
    numel: int
    """Elements of each rank's fp32 vector."""
    repeats: int = 3
    """Timed calls of each collective on the ipc path, after one untimed call."""
    host_repeats: int = 1
    """Timed calls on the host path (slow: seconds for a model's gradient)."""
    keep_values: bool = True
    """Bring the reduced and gathered vectors back (a test); off for a benchmark's sizes."""
    timeout_s: float = 300.0


@dataclass
class RankExchange:
    rank: int
    path: str
    """The path the ipc collectives took (host when the mapping was refused)."""
    ipc_reduced: torch.Tensor | None
    host_reduced: torch.Tensor | None
    ipc_gathered: torch.Tensor | None
    seconds: dict[str, list[float]] = field(default_factory=dict)
    """Per collective and path (`ipc_all_reduce`, `host_all_gather`, ...): each timed call."""


def rank_vector(rank: int, numel: int) -> torch.Tensor:
    """The vector rank `rank` reduces (host memory, seeded by the rank)."""
    generator = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(numel, generator=generator, dtype=torch.float32)


def _timed(call, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - start)
    return out


def _rank_main(rank: int, num_ranks: int, folder: str, job: ExchangeJob) -> None:
    torch.set_num_threads(1)
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{os.path.join(folder, 'init')}",
        rank=rank,
        world_size=num_ranks,
    )
    try:
        group = dist.group.WORLD
        size = ShardLayout(numel=job.numel, num_ranks=num_ranks).padded_shard_numel
        padded_numel = size * num_ranks
        choice = choose_path(["one-gpu"] * num_ranks, device_type="cuda")
        ipc = TrainerCollectives(choice, group, rank=rank, staging_numel=padded_numel)
        host = TrainerCollectives(
            PathChoice(CollectivePath.HOST, "gloo", "host path, for comparison"), group
        )
        mine = rank_vector(rank, job.numel).to(device)
        ipc_reduced = mine.clone()
        ipc.all_reduce_(ipc_reduced)
        host_reduced = mine.clone()
        host.all_reduce_(host_reduced)
        padded = torch.zeros(padded_numel, dtype=torch.float32, device=device)
        padded[rank * size : (rank + 1) * size] = float(rank + 1)
        ipc.all_gather_(padded, rank=rank)
        work = mine.clone()
        ipc_n, host_n = job.repeats, job.host_repeats
        seconds = {
            "ipc_all_reduce": _timed(lambda: ipc.all_reduce_(work), ipc_n),
            "ipc_all_gather": _timed(lambda: ipc.all_gather_(padded, rank=rank), ipc_n),
            "host_all_reduce": _timed(lambda: host.all_reduce_(work), host_n),
            "host_all_gather": _timed(lambda: host.all_gather_(padded, rank=rank), host_n),
        }
        keep = job.keep_values
        result = RankExchange(
            rank=rank,
            path=ipc.path.value,
            ipc_reduced=ipc_reduced.cpu() if keep else None,
            host_reduced=host_reduced.cpu() if keep else None,
            ipc_gathered=padded.cpu() if keep else None,
            seconds=seconds,
        )
        ipc.close()
        torch.save(result, os.path.join(folder, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def run_exchange(job: ExchangeJob, num_ranks: int) -> list[RankExchange]:
    """Every rank's results, in rank order (the ranks run in spawned processes on cuda:0)."""
    with tempfile.TemporaryDirectory(prefix="dynaresize-exchange-") as folder:
        return spawn_ranks(
            _rank_main, job, num_ranks, folder=folder, timeout_s=job.timeout_s, what="exchange"
        )
