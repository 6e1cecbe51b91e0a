"""Start live workers that carry the fast-resize half, outside the driver loop.

The strategies' tests and the resize benchmark need the executor's own workers, placement group,
world group and trainer state, but drive resizes themselves (a fixed sequence, each strategy in
turn on the same workers) instead of through a policy. This module does the driver's setup steps
for them and nothing else; `FastLiveWorker` is the live worker with `FastResizeWorker` mixed in.
"""

from __future__ import annotations

import time
from typing import Any

import ray
import torch

from ..cluster import PLACEMENT_GROUP_NAME, connect, reserve, start_workers
from ..config import LiveConfig
from ..roles import RoleMap
from ..runtime import Runtime
from ..worker import LiveWorker


class FastLiveWorker(LiveWorker):
    """The live worker, which carries the worker-side methods of the fast strategies
    (`FastResizeWorker` is one of its bases)."""


class BenchWorker(FastLiveWorker):
    """A fast live worker with a fixed load step, for measuring resizes (benchmarks/).

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
        trainer = self.trainer
        self.model.zero_grad(set_to_none=True)
        loss = self.model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        lo, hi = trainer.layout.bounds(trainer.rank)
        grads = [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
            for p in self.model.parameters()
        ]
        trainer.master.grad = torch.cat(grads)[lo:hi].float()
        del grads
        self.model.zero_grad(set_to_none=True)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.optimizer_step += 1


def setup_runtime(runtime: Runtime) -> int:
    """The driver's setup: world group, model, groups, roles, initial slices, first sync.

    Returns the number of model parameters.
    """
    rt = runtime
    infos = rt.run(rt.all_ids, "info", doing="starting")
    rt.form_world(master_addr=infos[0]["node_ip"])
    numel = rt.run(rt.all_ids, "build_model", doing="building the model")[0]
    rt.take_roles(weights_version=0)
    rt.run(rt.roles.trainer_ids, "initial_shard", doing="loading initial weights")
    rt.run(rt.roles.sync_ids, "sync_weights", doing="first weight sync", weights_version=0)
    return int(numel)


def start_runtime(
    config: LiveConfig, *, actor_cls: type = FastLiveWorker
) -> tuple[Runtime, Any, bool]:
    """Ray (joined or started), the placement group, fast workers, and the driver's setup."""
    started = connect(address=None, config=config)
    group = reserve(config)
    workers = start_workers(config, group, actor_cls=actor_cls)
    runtime = Runtime(
        config=config,
        workers=workers,
        roles=RoleMap.for_allocation(config.initial_allocation),
        start_wall=time.perf_counter(),
    )
    setup_runtime(runtime)
    return runtime, group, started


def restart_fast_workers(runtime: Runtime, *, actor_cls: type = FastLiveWorker) -> list:
    """Actor factory for `stop_and_rebuild` when the workers are `FastLiveWorker`s."""
    group = ray.util.get_placement_group(PLACEMENT_GROUP_NAME)
    return start_workers(runtime.config, group, actor_cls=actor_cls)


def restart_bench_workers(runtime: Runtime) -> list:
    return restart_fast_workers(runtime, actor_cls=BenchWorker)
