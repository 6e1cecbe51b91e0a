"""A trainer group in plain processes: N ranks of `worker.trainer.TrainerRole` on one machine.

Tests and benchmarks of the trainer alone start the ranks here (no Ray, no rollout): each rank
builds the model of the spec, joins a gloo group through a file, takes its ZeRO-1 slice of the
given whole state (or the model's initial weights), trains the given steps on its contiguous
share of each batch, and hands back its slice. Handing the slices of one group to a group of
another size through host memory, with the moments loaded by the deferred optimizer reload, is a
resize as the host path makes it.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..batch import RolloutSample
from ..rl.model import build_model, count_parameters
from ..rl.model_spec import ModelSpec
from ..rl.settings import ObjectiveSettings, OptimizerSettings
from ..worker.collectives import CollectivePath, PathChoice, choose_path
from ..worker.deferred_optimizer import DeferredOptimizerState
from ..worker.shards import ShardLayout, full_vectors, shards_from_full
from ..worker.trainer import TrainerRole


@dataclass(frozen=True)
class GroupJob:
    """What every rank of one group does."""

    model: ModelSpec
    settings: OptimizerSettings
    objective: ObjectiveSettings
    batches: list[list[RolloutSample]]
    micro_batch_samples: int = 4
    micro_batch_tokens: int | None = None
    device: str = "cpu"
    path: CollectivePath | None = None
    """None: as the trainer would choose on this device (ipc: the ranks share one GPU)."""
    start: dict[str, torch.Tensor] | None = None
    """Whole master and moment vectors to start from (None: the model's initial weights)."""
    start_step: int = 0
    defer_moments: bool = True
    """Load the start moments through the deferred optimizer reload."""
    timeout_s: float = 300.0


def _choice(job: GroupJob, num_ranks: int) -> PathChoice:
    device_type = torch.device(job.device).type
    keys = ["shared"] * num_ranks  # every rank here runs on the same device
    choice = choose_path(keys, device_type=device_type)
    if job.path is None or job.path is choice.path:
        return choice
    return PathChoice(job.path, "gloo", f"{job.path.value} path asked by the caller")


def _rank_main(rank: int, num_ranks: int, folder: str, job: GroupJob) -> None:
    torch.set_num_threads(1)
    device = torch.device(job.device)
    if device.type == "cuda":
        device = torch.device("cuda", device.index or 0)
        torch.cuda.set_device(device)
    group = None
    if num_ranks > 1:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{os.path.join(folder, 'init')}",
            rank=rank,
            world_size=num_ranks,
        )
        group = dist.group.WORLD
    try:
        model = build_model(job.model, device=device).requires_grad_(True)
        trainer = TrainerRole(
            worker_id=rank,
            model=model,
            device=device,
            settings=job.settings,
            objective=job.objective,
            micro_batch_samples=job.micro_batch_samples,
            micro_batch_tokens=job.micro_batch_tokens,
        )
        layout = ShardLayout(numel=count_parameters(model), num_ranks=num_ranks)
        trainer.bind(
            group=group,
            rank=rank,
            layout=layout,
            path=_choice(job, num_ranks),
            sharing_trainers=num_ranks,
        )
        _load_start(trainer, job)
        norms = []
        for batch in job.batches:
            tokens = sum(len(s.response_token_ids) for s in batch)
            share = -(-len(batch) // num_ranks)
            mine = batch[rank * share : (rank + 1) * share]
            norms.append(trainer.train(mine, num_batch_tokens=tokens).grad_norm)
        weights = torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters()])
        result = (rank, trainer.export_shard(), norms, weights if rank == 0 else None)
        torch.save(result, os.path.join(folder, f"rank{rank}.pt"))
    finally:
        if num_ranks > 1:
            dist.destroy_process_group()


def load_initial_weights(trainer: TrainerRole) -> None:
    """The rank's slice of its model's own weights, no moments (a first start)."""
    flat = torch.cat([p.detach().reshape(-1).float() for p in trainer.model.parameters()])
    lo, hi = trainer.layout.bounds(trainer.rank)
    trainer.load_weights(flat[lo:hi], optimizer_step=0)
    trainer.load_moments({})


def single_trainer(model: torch.nn.Module, device: torch.device, **settings) -> TrainerRole:
    """One trainer rank (no group) on `model`'s own initial weights; `settings` are
    `TrainerRole`'s keyword arguments besides the model and device."""
    trainer = TrainerRole(worker_id=0, model=model, device=device, **settings)
    trainer.bind(group=None, rank=0, layout=ShardLayout(numel=count_parameters(model), num_ranks=1))
    load_initial_weights(trainer)
    return trainer


def _load_start(trainer: TrainerRole, job: GroupJob) -> None:
    if job.start is None:
        load_initial_weights(trainer)
        return
    shard = shards_from_full(job.start, trainer.layout, optimizer_step=job.start_step)
    mine = shard[trainer.rank]
    trainer.load_weights(mine.master, optimizer_step=mine.optimizer_step)
    trainer.refresh_model()
    if not job.defer_moments or mine.optimizer_step == 0:
        trainer.load_moments(mine.moments)
        return
    master, optimizer = trainer.master_and_optimizer()
    trainer.deferred_moments = DeferredOptimizerState(
        optimizer, lambda: {master: trainer.adam_state(mine.moments, mine.optimizer_step)}
    )


@dataclass
class GroupResult:
    state: dict[str, torch.Tensor]
    """Whole master and moment vectors (host) after the last step."""
    optimizer_step: int
    grad_norms: list[float]
    weights: torch.Tensor
    """Rank 0's model parameters after the last step, flat, fp32 on the host."""


def run_group(job: GroupJob, num_ranks: int) -> GroupResult:
    """Run `job` on `num_ranks` fresh processes and collect their slices."""
    with tempfile.TemporaryDirectory(prefix="dynaresize-ranks-") as folder:
        if num_ranks == 1:  # one rank needs no group: run it here
            threads = torch.get_num_threads()
            _rank_main(0, 1, folder, job)
            torch.set_num_threads(threads)
            return _collect([torch.load(os.path.join(folder, "rank0.pt"), weights_only=False)])
        results = spawn_ranks(
            _rank_main, job, num_ranks, folder=folder, timeout_s=job.timeout_s, what="trainer"
        )
    return _collect(results)


def spawn_ranks(
    main: Callable[[int, int, str, Any], None],
    job: Any,
    num_ranks: int,
    *,
    folder: str,
    timeout_s: float,
    what: str,
) -> list[Any]:
    """Run `main(rank, num_ranks, folder, job)` in `num_ranks` spawned processes and load what
    each saved as `folder/rank<r>.pt`, in rank order; ranks still running at `timeout_s` are
    killed, and any rank's failure raises naming the ranks and exit codes."""
    context = mp.get_context("spawn")
    procs = [
        context.Process(target=main, args=(r, num_ranks, folder, job)) for r in range(num_ranks)
    ]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        proc.join(timeout=max(deadline - time.monotonic(), 1.0))
    failed = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode != 0]
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join()
    if failed:
        raise RuntimeError(f"{what} ranks failed (rank, exit code): {failed}")
    return [
        torch.load(os.path.join(folder, f"rank{r}.pt"), weights_only=False)
        for r in range(num_ranks)
    ]


def _collect(results: list) -> GroupResult:
    shards = [r[1] for r in results]
    return GroupResult(
        state=full_vectors(shards),
        optimizer_step=shards[0].optimizer_step,
        grad_norms=results[0][2],
        weights=results[0][3],
    )
