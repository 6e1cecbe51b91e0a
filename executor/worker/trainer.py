"""The Training role: data-parallel GRPO over the current trainer ranks, optimizer state ZeRO-1.

Each trainer holds the whole model for forward and backward, but the fp32 master weights and the
AdamW moments only for its contiguous slice of the flat parameter vector (`shards.ShardLayout`).
One step: local gradients on this rank's share of the batch, an all-reduce of the flat gradient
over the trainer group, the AdamW update of the own slice, and an all-gather of the updated slices
into the model. A resize re-cuts the slices (see `strategies/`), so state really moves between
ranks when the number of trainers changes.

Collectives run on host tensors over gloo: on CPU that is the only choice, and on one shared GPU
NCCL cannot join two ranks on the same device.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..batch import RolloutSample
from ..rl.model import load_flat_parameters
from ..rl.settings import ObjectiveSettings, OptimizerSettings
from .deferred_optimizer import DeferredOptimizerState
from .objective import LogprobGap, microbatch_loss_and_gap
from .shards import OPTIMIZER_TENSORS, ShardLayout, ShardState


@dataclass(frozen=True)
class TrainReport:
    """What one trainer did in one step (returned to the driver, kept in the records)."""

    worker_id: int
    rank: int
    weights_version: int
    """Optimizer steps applied before this step (the version the gradient was computed at)."""
    train_s: float
    loss_sum: float
    grad_norm: float
    consumed: tuple[tuple[int, int], ...]
    """(prompt_id, sample_index) of every sample this trainer trained on."""
    logprob_gap: LogprobGap = field(default_factory=LogprobGap)
    """Engine-reported vs recomputed logprobs of its samples (a health figure)."""


def flat_numel(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def flat_gradient(model: torch.nn.Module) -> torch.Tensor:
    """All gradients in `parameters()` order as one fp32 host vector (zeros where none)."""
    parts = []
    for param in model.parameters():
        grad = param.grad if param.grad is not None else torch.zeros_like(param)
        parts.append(grad.detach().reshape(-1).to(device="cpu", dtype=torch.float32))
    return torch.cat(parts)


class TrainerRole:
    """One trainer rank. Built on the worker's model; dropped when the worker changes role."""

    def __init__(
        self,
        *,
        worker_id: int,
        model: torch.nn.Module,
        device: torch.device,
        settings: OptimizerSettings,
        objective: ObjectiveSettings,
        micro_batch_samples: int,
    ) -> None:
        self.worker_id = worker_id
        self.model = model
        self.device = device
        self.settings = settings
        self.objective = objective
        self.micro_batch_samples = micro_batch_samples
        self.group: dist.ProcessGroup | None = None
        self.rank = 0
        self.layout = ShardLayout(numel=flat_numel(model), num_ranks=1)
        self.master: torch.nn.Parameter | None = None
        self.optimizer: torch.optim.AdamW | None = None
        self.optimizer_step = 0
        self.deferred_moments: DeferredOptimizerState | None = None
        """Moments still loading in the background after a resize; the first optimizer step
        and any export before it wait for them."""

    # --- state ---------------------------------------------------------------------------

    def master_and_optimizer(self) -> tuple[torch.nn.Parameter, torch.optim.AdamW]:
        """This rank's fp32 master slice and its AdamW (both exist once weights are loaded)."""
        if self.master is None or self.optimizer is None:
            raise RuntimeError(f"trainer {self.worker_id} has no weights loaded yet")
        return self.master, self.optimizer

    def bind(self, *, group: dist.ProcessGroup | None, rank: int, layout: ShardLayout) -> None:
        """Join a trainer group as `rank` of `layout.num_ranks` (state comes with load_shard)."""
        self.group, self.rank, self.layout = group, rank, layout

    def load_weights(self, shard_master: torch.Tensor, *, optimizer_step: int) -> None:
        """Take this rank's fp32 master slice (the weights part of a shard)."""
        expected = self.layout.shard_numel(self.rank)
        if shard_master.numel() != expected:
            raise ValueError(f"master slice has {shard_master.numel()} elements, want {expected}")
        data = shard_master.to(self.device, dtype=torch.float32, copy=True)
        self.master = torch.nn.Parameter(data)
        s = self.settings
        self.optimizer = torch.optim.AdamW(
            [self.master], lr=s.lr, betas=s.betas, eps=s.eps, weight_decay=s.weight_decay
        )
        self.optimizer_step = optimizer_step

    def load_moments(self, moments: dict[str, torch.Tensor]) -> None:
        """Take this rank's AdamW moments; before the first step there are none to take."""
        master, optimizer = self.master_and_optimizer()
        if self.optimizer_step == 0:
            optimizer.state.pop(master, None)
            return
        state = {k: moments[k].to(self.device, dtype=torch.float32, copy=True) for k in moments}
        state["step"] = torch.tensor(float(self.optimizer_step))
        optimizer.state[master] = state

    def load_shard(self, shard: ShardState) -> None:
        if shard.layout != self.layout or shard.rank != self.rank:
            raise ValueError(
                f"shard is rank {shard.rank} of {shard.layout}, trainer is rank {self.rank} "
                f"of {self.layout}"
            )
        self.load_weights(shard.master, optimizer_step=shard.optimizer_step)
        self.load_moments(shard.moments)

    def export_shard(self) -> ShardState:
        """A host copy of this rank's slice: master weights, moments, step."""
        if self.deferred_moments is not None:
            self.deferred_moments.wait_and_install()
            self.deferred_moments = None
        master, optimizer = self.master_and_optimizer()
        state = optimizer.state.get(master, {})
        moments = {
            k: (
                state[k].detach().to("cpu", copy=True)
                if k in state
                else torch.zeros(master.numel(), dtype=torch.float32)
            )
            for k in OPTIMIZER_TENSORS
        }
        return ShardState(
            rank=self.rank,
            layout=self.layout,
            master=master.detach().to("cpu", copy=True),
            moments=moments,
            optimizer_step=self.optimizer_step,
        )

    # --- one step ------------------------------------------------------------------------

    def train(self, samples: list[RolloutSample], *, num_batch_tokens: int) -> TrainReport:
        """Gradient on this rank's samples, all-reduce, own-slice AdamW, all-gather weights.

        `num_batch_tokens` is the response-token count of the whole batch (every rank): each
        rank's loss is a sum over its tokens divided by that one number, so the all-reduced
        gradient is the whole batch's gradient whatever the split.
        """
        master, optimizer = self.master_and_optimizer()
        start = time.perf_counter()
        version = self.optimizer_step
        self.model.train()
        self.model.zero_grad(set_to_none=True)
        loss_sum = 0.0
        gap = LogprobGap()
        for first in range(0, len(samples), self.micro_batch_samples):
            micro = samples[first : first + self.micro_batch_samples]
            loss, micro_gap = microbatch_loss_and_gap(
                self.model,
                micro,
                device=self.device,
                num_batch_tokens=num_batch_tokens,
                settings=self.objective,
            )
            loss.backward()
            loss_sum += float(loss.detach())
            gap = gap + micro_gap
        grad = flat_gradient(self.model)
        self.model.zero_grad(set_to_none=True)
        if self.layout.num_ranks > 1:
            dist.all_reduce(grad, group=self.group)
        grad_norm = float(grad.norm())
        if self.settings.grad_clip_norm is not None:
            grad.mul_(min(1.0, self.settings.grad_clip_norm / (grad_norm + 1e-6)))
        lo, hi = self.layout.bounds(self.rank)
        master.grad = grad[lo:hi].to(self.device)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self.optimizer_step += 1
        load_flat_parameters(self.model, self.gather_master())
        self.model.eval()
        return TrainReport(
            worker_id=self.worker_id,
            rank=self.rank,
            weights_version=version,
            train_s=time.perf_counter() - start,
            loss_sum=loss_sum,
            grad_norm=grad_norm,
            consumed=tuple(s.key for s in samples),
            logprob_gap=gap,
        )

    def gather_master(self) -> torch.Tensor:
        """Every rank's master slice, concatenated into the whole fp32 vector (host)."""
        master, _ = self.master_and_optimizer()
        mine = master.detach().to("cpu")
        if self.layout.num_ranks == 1:
            return mine
        size = self.layout.padded_shard_numel
        padded = torch.zeros(size, dtype=torch.float32)
        padded[: mine.numel()] = mine
        parts = [torch.empty(size, dtype=torch.float32) for _ in range(self.layout.num_ranks)]
        dist.all_gather(parts, padded, group=self.group)
        return torch.cat(parts)[: self.layout.numel]
