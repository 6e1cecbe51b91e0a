"""Generation and training alternating in one process, built from pieces a distributed driver
can call one by one: `build_rollout_batch` (step k's prompts through an engine, scored; or
`build_requests` + any engines + `score_results` when the requests are split over replicas),
`make_train_batch` (tokens and group advantages), `train_on_batch` (old log-probs, then
`num_minibatches` optimizer steps) and `RLLoop`, which strings them together.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from .engine import (
    FinishReason,
    GenerationRequest,
    GenerationResult,
    RolloutEngine,
    SamplingParams,
)
from .grpo import (
    GRPOConfig,
    TrainBatch,
    build_optimizer,
    compute_loss,
    group_advantages,
    optimizer_step,
    token_logprobs,
)
from .model import ModelSpec, build_model
from .sampler import KVCacheSampler, SamplerConfig
from .task import RepeatTask, RepeatTaskConfig, TaskItem


class RLConfig(BaseModel):
    """One single-process GRPO run on the built-in task."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: ModelSpec = Field(default_factory=ModelSpec, description="The policy model.")
    task: RepeatTaskConfig = Field(default_factory=RepeatTaskConfig, description="The task.")
    sampler: SamplerConfig = Field(default_factory=SamplerConfig, description="The KV sampler.")
    grpo: GRPOConfig = Field(default_factory=GRPOConfig, description="Objective and optimizer.")
    temperature: float = Field(default=1.0, ge=0, description="Sampling temperature.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(default=128, ge=1, description="Response length cap (tokens).")
    num_prompts_per_step: int = Field(default=16, ge=1, description="Prompts per rollout batch.")
    num_samples_per_prompt: int = Field(default=8, ge=2, description="GRPO group size.")
    num_minibatches: int = Field(
        default=1, ge=1, description="Optimizer steps per rollout batch (rows split evenly)."
    )
    num_steps: int = Field(default=30, ge=1, description="Training steps of the run.")
    seed: int = Field(default=0, ge=0, description="Seed of prompts and sampling.")
    device: str = Field(default="cpu", description="torch device of model and sampler.")

    def sampling_params(self, *, eos_token_id: int) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            max_new_tokens=self.max_new_tokens,
            eos_token_id=eos_token_id,
            seed=self.seed,
        )


@dataclass(frozen=True)
class SampleRecord:
    """One scored sample and where it came from."""

    step: int
    policy_version: int
    prompt_id: int
    sample_index: int
    prompt_token_ids: tuple[int, ...]
    response_token_ids: tuple[int, ...]
    reward: float
    correct: bool
    finish_reason: FinishReason
    finish_s: float


@dataclass
class RolloutBatch:
    """The scored samples of one step, grouped by prompt (prompt order, then sample index)."""

    step: int
    policy_version: int
    num_samples_per_prompt: int
    samples: list[SampleRecord]
    generate_wall_s: float
    active_batch_per_step: list[int] = field(default_factory=list)

    def rewards(self) -> np.ndarray:
        """Rewards as [num_prompts, num_samples_per_prompt]."""
        values = np.array([s.reward for s in self.samples], dtype=np.float64)
        return values.reshape(-1, self.num_samples_per_prompt)

    def response_lengths(self) -> np.ndarray:
        return np.array([len(s.response_token_ids) for s in self.samples], dtype=np.int64)


def build_requests(items: list[TaskItem], *, num_samples: int) -> list[GenerationRequest]:
    return [
        GenerationRequest(item.prompt_id, index, item.prompt_token_ids)
        for item in items
        for index in range(num_samples)
    ]


def build_rollout_batch(
    *,
    engine: RolloutEngine,
    task: RepeatTask,
    config: RLConfig,
    step: int,
    policy_version: int,
    items: list[TaskItem] | None = None,
) -> RolloutBatch:
    """Generate and score step `step`'s prompts (drawn from (seed, step) unless `items` given)."""
    if items is None:
        items = task.sample_items(
            seed=config.seed, step=step, num_prompts=config.num_prompts_per_step
        )
    requests = build_requests(items, num_samples=config.num_samples_per_prompt)
    params = config.sampling_params(eos_token_id=task.tokenizer.eos_token_id)
    output = engine.generate(requests, params, step=step)
    return RolloutBatch(
        step=step,
        policy_version=policy_version,
        num_samples_per_prompt=config.num_samples_per_prompt,
        samples=score_results(
            task=task, items=items, results=output.results, step=step, policy_version=policy_version
        ),
        generate_wall_s=output.wall_s,
        active_batch_per_step=list(output.active_batch_per_step),
    )


def score_results(
    *,
    task: RepeatTask,
    items: list[TaskItem],
    results: list[GenerationResult],
    step: int,
    policy_version: int,
) -> list[SampleRecord]:
    """Score generated samples against their prompts; sorted by (prompt order, sample index),
    so results gathered from several engines in any order give the same batch."""
    by_id = {item.prompt_id: item for item in items}
    order = {item.prompt_id: rank for rank, item in enumerate(items)}
    samples = []
    for result in sorted(results, key=lambda r: (order[r.prompt_id], r.sample_index)):
        item = by_id[result.prompt_id]
        score = task.score(item, result.token_ids)
        samples.append(
            SampleRecord(
                step=step,
                policy_version=policy_version,
                prompt_id=result.prompt_id,
                sample_index=result.sample_index,
                prompt_token_ids=item.prompt_token_ids,
                response_token_ids=result.token_ids,
                reward=score.reward,
                correct=score.correct,
                finish_reason=result.finish_reason,
                finish_s=result.finish_s,
            )
        )
    return samples


def make_train_batch(batch: RolloutBatch, *, grpo: GRPOConfig, pad_token_id: int) -> TrainBatch:
    """Right-padded prompt+response rows and their group-relative advantages."""
    rewards = torch.tensor(batch.rewards(), dtype=torch.float32)
    advantages = group_advantages(
        rewards, normalize_std=grpo.normalize_advantage_std, eps=grpo.advantage_eps
    ).reshape(-1)
    sequences = [(s.prompt_token_ids, s.response_token_ids) for s in batch.samples]
    return TrainBatch.pack(sequences, advantages, pad_token_id=pad_token_id)


@torch.no_grad()
def attach_logprobs(model: torch.nn.Module, batch: TrainBatch, *, reference: bool = False) -> None:
    """Fill `batch.old_logprobs` (or `ref_logprobs`) with the model's current log-probs."""
    logprobs = token_logprobs(model, batch) * batch.response_mask
    if reference:
        batch.ref_logprobs = logprobs
    else:
        batch.old_logprobs = logprobs


@dataclass
class TrainMetrics:
    loss: float
    policy_loss: float
    kl: float
    clip_fraction: float
    grad_norm: float
    num_tokens: int
    train_s: float


def train_on_batch(
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: TrainBatch,
    config: RLConfig,
    reference: torch.nn.Module | None = None,
) -> TrainMetrics:
    """Old log-probs from the current weights, then `num_minibatches` clipped-ratio updates."""
    start = time.perf_counter()
    model.eval()
    attach_logprobs(model, batch)
    if reference is not None:
        attach_logprobs(reference, batch, reference=True)
    model.train()
    splits = torch.arange(batch.input_ids.shape[0]).chunk(config.num_minibatches)
    totals = {"loss": 0.0, "policy": 0.0, "kl": 0.0, "clip": 0.0, "norm": 0.0}
    for rows in splits:
        micro = batch.select(rows)
        out = compute_loss(model, micro, config.grpo)
        out.loss.backward()
        totals["norm"] += optimizer_step(model, optimizer, config.grpo)
        totals["loss"] += out.loss.item()
        totals["policy"] += out.policy_loss
        totals["kl"] += out.kl
        totals["clip"] += out.clip_fraction
    model.eval()
    count = len(splits)
    return TrainMetrics(
        loss=totals["loss"] / count,
        policy_loss=totals["policy"] / count,
        kl=totals["kl"] / count,
        clip_fraction=totals["clip"] / count,
        grad_norm=totals["norm"] / count,
        num_tokens=batch.num_response_tokens,
        train_s=time.perf_counter() - start,
    )


@dataclass
class StepMetrics:
    """What one step of the loop measured."""

    step: int
    mean_reward: float
    correct_fraction: float
    mean_response_len: float
    p50_response_len: float
    p99_response_len: float
    cap_fraction: float  # share of responses cut at max_new_tokens
    rollout_s: float
    train: TrainMetrics


class RLLoop:
    """Owns a model, its sampler and optimizer; `step(k)` generates batch k and trains on it.
    The sampler shares the trainer's model, so no weight transfer is needed in one process."""

    def __init__(self, config: RLConfig) -> None:
        self.config = config
        self.task = RepeatTask(config.task)
        self.model = build_model(config.model, device=config.device)
        self.engine = KVCacheSampler(self.model, config.sampler)
        self.optimizer = build_optimizer(self.model, config.grpo)
        self.reference = None
        if config.grpo.kl_coef > 0:
            self.reference = build_model(config.model, device=config.device)
        self.policy_version = 0

    def step(self, step: int) -> StepMetrics:
        batch, metrics = self.rollout_and_train(step)
        return summarise(batch, metrics)

    def rollout_and_train(self, step: int) -> tuple[RolloutBatch, TrainMetrics]:
        """Generate step `step`'s batch with the current weights, then train on it."""
        batch = build_rollout_batch(
            engine=self.engine,
            task=self.task,
            config=self.config,
            step=step,
            policy_version=self.policy_version,
        )
        train_batch = make_train_batch(
            batch, grpo=self.config.grpo, pad_token_id=self.task.tokenizer.pad_token_id
        ).to(self.config.device)
        metrics = train_on_batch(
            model=self.model,
            optimizer=self.optimizer,
            batch=train_batch,
            config=self.config,
            reference=self.reference,
        )
        self.policy_version += 1
        return batch, metrics

    def run(self, *, on_step: Callable[[StepMetrics], None] | None = None) -> list[StepMetrics]:
        history = []
        for step in range(self.config.num_steps):
            metrics = self.step(step)
            history.append(metrics)
            if on_step is not None:
                on_step(metrics)
        return history


def summarise(batch: RolloutBatch, train: TrainMetrics) -> StepMetrics:
    lengths = batch.response_lengths()
    capped = [s.finish_reason == FinishReason.LENGTH for s in batch.samples]
    return StepMetrics(
        step=batch.step,
        mean_reward=float(batch.rewards().mean()),
        correct_fraction=float(np.mean([s.correct for s in batch.samples])),
        mean_response_len=float(lengths.mean()),
        p50_response_len=float(np.percentile(lengths, 50)),
        p99_response_len=float(np.percentile(lengths, 99)),
        cap_fraction=float(np.mean(capped)),
        rollout_s=batch.generate_wall_s,
        train=train,
    )
