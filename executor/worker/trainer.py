"""The Training role: data-parallel GRPO over the current trainer ranks, optimizer state ZeRO-1.

Each trainer holds the whole model for forward and backward, but the fp32 master weights and the
AdamW moments only for its contiguous slice of the flat parameter vector (`shards.ShardLayout`).
One step: gradients of this rank's share of the batch (length-bucketed micro-batches,
`microbatch.py`) accumulated in fp32 into one flat buffer on the device, an all-reduce of that
buffer over the trainer group, the AdamW update (fused on CUDA) of the own slice on the device,
and an all-gather of the updated slices back into the model's parameters. Nothing of the step
goes through host memory unless some, not all, trainers share a GPU (`collectives.py` picks
the path: trainers that all share one GPU reduce through CUDA IPC buffers); the
step's few figures (loss, gradient norm, log-prob gap) are read once, at its end. A resize
re-cuts the slices (see `strategies/`), so state really moves between ranks when the number of
trainers changes; that is the only time master slices and moments visit the host.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from dynaresize.traces.worker_steps import TrainWorkerStep

from ..batch import RolloutSample
from ..rl.model import count_parameters
from ..rl.settings import ObjectiveSettings, OptimizerSettings
from ..rl.task import TOKENIZER
from .collectives import PathChoice, TrainerCollectives, choose_path
from .deferred_optimizer import DeferredOptimizerState
from .microbatch import NUM_STATS, length_buckets, micro_batch_token_budget, microbatch_backward
from .objective import LogprobGap, pack
from .shards import OPTIMIZER_TENSORS, ShardLayout, ShardState
from .step_timing import PartClock, allocator_counts, device_free_bytes, host_load_1m


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
    parts: TrainWorkerStep | None = None
    """Where the step's time went on this trainer, and the memory it found: its trace record."""


@dataclass(frozen=True)
class MicroBatchPlan:
    """One step's micro-batches and the token budget they were cut to (None: rows only);
    the step's record reports both."""

    batches: list[list[RolloutSample]]
    token_budget: int | None


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
        micro_batch_tokens: int | None = None,
        activation_checkpointing: bool = False,
    ) -> None:
        self.worker_id = worker_id
        self.model = model
        self.device = device
        self.settings = settings
        self.objective = objective
        self.micro_batch_samples = micro_batch_samples
        self.micro_batch_tokens = micro_batch_tokens
        """Token budget of one micro-batch; None: from the memory check on CUDA, and
        `micro_batch_samples` rows on a CPU."""
        self.activation_checkpointing = activation_checkpointing
        enable = getattr(model, "gradient_checkpointing_enable", None)
        if activation_checkpointing and callable(enable):
            enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.group: dist.ProcessGroup | None = None
        self.rank = 0
        self.layout = ShardLayout(numel=count_parameters(model), num_ranks=1)
        self.collectives = TrainerCollectives(choose_path(["one"], device_type=device.type), None)
        self.sharing_trainers = 1
        """Trainers of the group on this trainer's device (the memory check divides by it)."""
        self.master: torch.nn.Parameter | None = None
        self.optimizer: torch.optim.AdamW | None = None
        self.optimizer_step = 0
        self.deferred_moments: DeferredOptimizerState | None = None
        """Moments still loading in the background after a resize; the first optimizer step
        and any export before it wait for them."""
        self._flat: torch.Tensor | None = None
        """fp32 buffer of num_ranks x padded slice elements on the device: the gradient while
        the step accumulates and reduces, then the gathered master weights."""

    # --- state ---------------------------------------------------------------------------

    def master_and_optimizer(self) -> tuple[torch.nn.Parameter, torch.optim.AdamW]:
        """This rank's fp32 master slice and its AdamW (both exist once weights are loaded)."""
        if self.master is None or self.optimizer is None:
            raise RuntimeError(f"trainer {self.worker_id} has no weights loaded yet")
        return self.master, self.optimizer

    def bind(
        self,
        *,
        group: dist.ProcessGroup | None,
        rank: int,
        layout: ShardLayout,
        path: PathChoice | None = None,
        sharing_trainers: int = 1,
    ) -> None:
        """Join a trainer group as `rank` of `layout.num_ranks` (state comes with load_shard).
        `path`: how the group's collectives run (default: none for one rank, else on the
        group's tensors as they are, which is right for CPU trainers)."""
        if path is None:
            keys = ["cpu"] * layout.num_ranks
            path = choose_path(keys, device_type="cpu")
        self.group, self.rank, self.layout = group, rank, layout
        self.collectives.close()
        self.collectives = TrainerCollectives(
            path,
            group,
            rank=rank,
            staging_numel=layout.padded_shard_numel * layout.num_ranks,
        )
        self.sharing_trainers = sharing_trainers
        self._flat = None

    def _new_optimizer(self, master: torch.nn.Parameter) -> torch.optim.AdamW:
        s = self.settings
        fused = self.device.type == "cuda"
        return torch.optim.AdamW(
            [master],
            lr=s.lr,
            betas=s.betas,
            eps=s.eps,
            weight_decay=s.weight_decay,
            fused=fused or None,
        )

    def load_weights(self, shard_master: torch.Tensor, *, optimizer_step: int) -> None:
        """Take this rank's fp32 master slice (the weights part of a shard)."""
        expected = self.layout.shard_numel(self.rank)
        if shard_master.numel() != expected:
            raise ValueError(f"master slice has {shard_master.numel()} elements, want {expected}")
        data = shard_master.to(self.device, dtype=torch.float32, copy=True)
        self.master = torch.nn.Parameter(data)
        self.optimizer = self._new_optimizer(self.master)
        self.optimizer_step = optimizer_step

    def adam_state(self, moments: dict[str, torch.Tensor], optimizer_step: int) -> dict:
        """AdamW's state of the master slice: the moments on the device and the step count
        (a device tensor, which the fused update wants)."""
        state: dict = {
            k: moments[k].to(self.device, dtype=torch.float32, copy=True) for k in moments
        }
        state["step"] = torch.tensor(float(optimizer_step), device=self.device)
        return state

    def load_moments(self, moments: dict[str, torch.Tensor]) -> None:
        """Take this rank's AdamW moments; before the first step there are none to take."""
        master, optimizer = self.master_and_optimizer()
        if self.optimizer_step == 0:
            optimizer.state.pop(master, None)
            return
        optimizer.state[master] = self.adam_state(moments, self.optimizer_step)

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
        start = time.perf_counter()
        version = self.optimizer_step
        load = host_load_1m()
        free = device_free_bytes(self.device)
        counts_before = allocator_counts(self.device)
        deferred = self.deferred_moments
        installed_before = deferred is None or deferred.installed
        clock = PartClock(self.device)
        plan = self.micro_batch_plan(samples)
        figures = self.step(samples, num_batch_tokens=num_batch_tokens, clock=clock, plan=plan)
        loss_sum, gap_sum, gap_tokens, grad_norm = figures.tolist()  # the step's one read
        train_s = time.perf_counter() - start
        seconds = clock.seconds()
        counts_after = allocator_counts(self.device)
        allocs = retries = reserved = None
        if counts_before is not None and counts_after is not None:
            allocs = counts_after.device_allocs - counts_before.device_allocs
            retries = counts_after.alloc_retries - counts_before.alloc_retries
            reserved = counts_after.reserved_bytes
        moments_wait_s = 0.0
        if deferred is not None and deferred.installed and not installed_before:
            moments_wait_s = deferred.waited_s  # installed by this step's update
        parts = TrainWorkerStep(
            worker_id=self.worker_id,
            rank=self.rank,
            num_trainers=self.layout.num_ranks,
            train_s=train_s,
            compute_s=seconds["compute"],
            all_reduce_s=seconds["all_reduce"],
            optimizer_s=seconds["optimizer"],
            all_gather_s=seconds["all_gather"],
            moments_wait_s=moments_wait_s,
            micro_batches=len(plan.batches),
            token_budget=plan.token_budget,
            device_free_bytes=free,
            device_allocs=allocs,
            alloc_retries=retries,
            reserved_bytes=reserved,
            host_load_1m=load,
        )
        return TrainReport(
            worker_id=self.worker_id,
            rank=self.rank,
            weights_version=version,
            train_s=train_s,
            loss_sum=loss_sum,
            grad_norm=grad_norm,
            consumed=tuple(s.key for s in samples),
            logprob_gap=LogprobGap(gap_sum, round(gap_tokens)),
            parts=parts,
        )

    def step(
        self,
        samples: list[RolloutSample],
        *,
        num_batch_tokens: int,
        clock: PartClock | None = None,
        plan: MicroBatchPlan | None = None,
    ) -> torch.Tensor:
        """The step without reading anything back: returns the device tensor [loss sum, gap
        sum, gap tokens, gradient norm]. Moves nothing to host memory on the none and device
        paths (a CUDA test counts the copies). `clock` marks the end of each part (compute,
        all_reduce, optimizer, all_gather) without synchronising. `plan`: the micro-batches
        (default: `micro_batch_plan(samples)`)."""
        mark = clock.mark if clock is not None else (lambda name: None)
        master, optimizer = self.master_and_optimizer()
        flat = self._flat_buffer()
        grads = flat[: self.layout.numel]
        grads.zero_()
        views = self._views(grads)
        stats = torch.zeros(NUM_STATS + 1, dtype=torch.float32, device=self.device)
        self.model.train()
        self.model.zero_grad(set_to_none=True)
        if plan is None:
            plan = self.micro_batch_plan(samples)
        for micro in plan.batches:
            batch = pack(micro, device=self.device, pad_token_id=TOKENIZER.pad_token_id)
            microbatch_backward(
                self.model,
                micro,
                batch,
                num_batch_tokens=num_batch_tokens,
                settings=self.objective,
                stats=stats,
            )
            self._accumulate(views)
        mark("compute")
        self.collectives.all_reduce_(grads)
        mark("all_reduce")
        grad_norm = torch.linalg.vector_norm(grads)
        stats[NUM_STATS] = grad_norm
        if self.settings.grad_clip_norm is not None:
            scale = (self.settings.grad_clip_norm / (grad_norm + 1e-6)).clamp(max=1.0)
            grads.mul_(scale)
        lo, hi = self.layout.bounds(self.rank)
        master.grad = grads[lo:hi]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self.optimizer_step += 1
        mark("optimizer")
        self._gather_into_model(flat)
        mark("all_gather")
        self.model.eval()
        return stats

    def micro_batch_plan(self, samples: list[RolloutSample]) -> MicroBatchPlan:
        """This step's micro-batches: length buckets within the token budget (configured, or
        from the memory check on CUDA), at most `micro_batch_samples` rows where no token
        budget applies."""
        budget = self.micro_batch_tokens
        if budget is None:
            budget = micro_batch_token_budget(
                self.model,
                self.device,
                checkpointing=self.activation_checkpointing,
                sharing_trainers=self.sharing_trainers,
            )
        max_rows = self.micro_batch_samples if budget is None else None
        buckets = length_buckets(
            [s.num_tokens for s in samples], max_tokens=budget, max_rows=max_rows
        )
        return MicroBatchPlan(
            batches=[[samples[i] for i in bucket] for bucket in buckets], token_budget=budget
        )

    def refresh_model(self) -> None:
        """All-gather the master slices into the model's parameters (trainer-group collective)."""
        self._gather_into_model(self._flat_buffer())

    def _flat_buffer(self) -> torch.Tensor:
        size = self.layout.padded_shard_numel * self.layout.num_ranks
        if self._flat is None or self._flat.numel() != size:
            self._flat = torch.empty(size, dtype=torch.float32, device=self.device)
        return self._flat

    def _views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        views, offset = [], 0
        for param in self.model.parameters():
            views.append(flat[offset : offset + param.numel()].view_as(param))
            offset += param.numel()
        return views

    def _accumulate(self, views: list[torch.Tensor]) -> None:
        """Add the micro-batch's gradients (the model's dtype) into the fp32 buffer and free
        them: fp32 accumulation over micro-batches."""
        params = self.model.parameters()
        pairs = [(v, p.grad) for v, p in zip(views, params, strict=True) if p.grad is not None]
        if pairs:
            torch._foreach_add_([v for v, _ in pairs], [g for _, g in pairs])
        self.model.zero_grad(set_to_none=True)

    def _gather_into_model(self, flat: torch.Tensor) -> None:
        master, _ = self.master_and_optimizer()
        size = self.layout.padded_shard_numel
        with torch.no_grad():
            flat[self.rank * size : self.rank * size + master.numel()].copy_(master.detach())
            self.collectives.all_gather_(flat, rank=self.rank)
            params: list[torch.Tensor] = list(self.model.parameters())
            torch._foreach_copy_(params, self._views(flat[: self.layout.numel]))
