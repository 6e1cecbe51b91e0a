"""Start live workers outside the driver loop, for tests and benchmarks that drive resizes.

The strategies' tests and the resize benchmark need the executor's own workers, placement group,
world group and trainer state, but drive resizes themselves (a fixed sequence, each strategy in
turn on the same workers) instead of through a policy. This module does the driver's setup steps
for them and nothing else; `BenchWorker` is the live worker with a fixed load step.
`live_session` gives tests a set-up `LiveSession` on a local cluster, to run or to drive.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from ray.util.placement_group import PlacementGroup

from ..cluster.ray_cluster import connect, reserve, start, start_workers
from ..cluster.runtime import Runtime
from ..cluster.worker_setup import set_up_workers
from ..config import LiveConfig
from ..roles import RoleMap
from ..session import LiveSession
from ..strategies.catalog import live_worker_class
from ..worker.actor import LiveWorker


class BenchWorker(LiveWorker):
    """The live worker with a fixed load step, for measuring resizes (benchmarks/).

    A trainer runs forward and backward on a fixed batch of random tokens and the AdamW update of
    its own ZeRO-1 slice from its local gradient (so the update reads the moments a resize moved,
    through the deferred-reload synchronisation point); the gradient all-reduce and the weight
    all-gather are left out, because over gloo on one shared device they would dominate the step
    without touching anything a resize changes. A rollout replica runs a forward pass of a batch.
    """

    def bench_step(self, *, batch_size: int, seq_len: int, seed: int) -> dict[str, float]:
        start = time.perf_counter()
        gen = torch.Generator(device="cpu").manual_seed(seed)
        vocab = self.model.config.vocab_size
        tokens = torch.randint(vocab, (batch_size, seq_len), generator=gen).to(self.device)
        if self.trainer is not None:
            self._bench_train(tokens)
        else:
            with torch.no_grad():
                self.model(input_ids=tokens)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return {"s": time.perf_counter() - start}

    def _bench_train(self, tokens: torch.Tensor) -> None:
        trainer = self._trainer()
        master, optimizer = trainer.master_and_optimizer()
        self.model.zero_grad(set_to_none=True)
        loss = self.model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        lo, hi = trainer.layout.bounds(trainer.rank)
        grads = [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
            for p in self.model.parameters()
        ]
        master.grad = torch.cat(grads)[lo:hi].float()
        del grads
        self.model.zero_grad(set_to_none=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        trainer.optimizer_step += 1


def start_runtime(
    config: LiveConfig, *, worker: type[LiveWorker] = LiveWorker
) -> tuple[Runtime, PlacementGroup, bool]:
    """Ray (joined or started), the placement group, workers of `worker` with every strategy's
    worker half, and the driver's setup (`cluster.worker_setup.set_up_workers`)."""
    started = connect(address=None, config=config)
    group = reserve(config)
    actor_cls = live_worker_class(worker)
    workers = start_workers(config, group, actor_cls=actor_cls)
    runtime = Runtime(
        config=config,
        workers=workers,
        roles=RoleMap.for_allocation(config.initial_allocation),
        start_wall=time.perf_counter(),
        actor_cls=actor_cls,
    )
    set_up_workers(runtime)
    return runtime, group, started


@contextmanager
def live_session(
    config: LiveConfig,
    out: Path,
    *,
    before_setup: Callable[[Runtime], object] = lambda _runtime: None,
) -> Iterator[LiveSession]:
    """A local cluster and a live session on it, set up and ready to run, as `run_live` builds
    them (without its checks, watchdog and fault records); closed and shut down on the way out.
    `before_setup(runtime)` runs between the workers' start and their setup (a fault to inject)."""
    cluster = start(config, address=None, actor_cls=live_worker_class())
    try:
        runtime = Runtime.for_cluster(cluster, config)
        before_setup(runtime)
        session = LiveSession(config, runtime, out, None, None, notes=cluster.notes)
        try:
            yield session
        finally:
            session.close()
    finally:
        cluster.shutdown()
