"""The trainer's loss on one micro-batch, normalised so that data parallelism does not change it.

A thin adapter from rollout samples to the RL core's GRPO (`rl.grpo`): the samples are packed
into a `TrainBatch`, the old log-probabilities are recomputed by the trainer with the weights the
step starts from, and `rl.grpo.compute_loss` gives the clipped-ratio loss as a *sum* over the
micro-batch's response tokens divided by the response-token count of the whole step's batch (all
ranks). So the gradients the trainer group all-reduces add up to the gradient of the whole batch
however it was split: the split only changes the order of floating-point additions
(docs/live-executor.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..batch import RolloutSample
from ..rl import grpo
from ..rl.settings import ObjectiveSettings


def pack(
    samples: list[RolloutSample], *, device: torch.device, pad_token_id: int
) -> grpo.TrainBatch:
    """Right-padded prompt+response rows; the response mask marks the response tokens."""
    advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    sequences = [(s.prompt_token_ids, s.response_token_ids) for s in samples]
    return grpo.TrainBatch.pack(sequences, advantages, pad_token_id=pad_token_id).to(device)


@dataclass(frozen=True)
class LogprobGap:
    """How far the logprobs a rollout engine reported are from the trainer's own recomputation:
    the sum of absolute differences over the response tokens that have both, and their count."""

    abs_sum: float = 0.0
    tokens: int = 0

    def __add__(self, other: LogprobGap) -> LogprobGap:
        return LogprobGap(self.abs_sum + other.abs_sum, self.tokens + other.tokens)

    @property
    def mean(self) -> float | None:
        return self.abs_sum / self.tokens if self.tokens else None


def engine_logprob_gap(samples: list[RolloutSample], trainer_logprobs: torch.Tensor) -> LogprobGap:
    """Per-token |engine - trainer| over the samples whose engine reported logprobs.

    `trainer_logprobs` is `grpo.token_logprobs` of the packed samples: row i holds the logprob
    of each token at its own position, so sample i's response starts at its prompt's length.
    """
    total, count = 0.0, 0
    host = trainer_logprobs.detach().float().cpu()
    for row, sample in enumerate(samples):
        reported = sample.engine_logprobs
        if not reported:
            continue
        first = len(sample.prompt_token_ids)
        mine = host[row, first : first + len(reported)]
        total += float((mine - torch.tensor(reported, dtype=torch.float32)).abs().sum())
        count += len(reported)
    return LogprobGap(total, count)


def microbatch_loss(
    model: torch.nn.Module,
    samples: list[RolloutSample],
    *,
    device: torch.device,
    num_batch_tokens: int,
    settings: ObjectiveSettings,
) -> torch.Tensor:
    """The micro-batch's GRPO loss: sum over its response tokens / the whole batch's tokens."""
    return microbatch_loss_and_gap(
        model, samples, device=device, num_batch_tokens=num_batch_tokens, settings=settings
    )[0]


def microbatch_loss_and_gap(
    model: torch.nn.Module,
    samples: list[RolloutSample],
    *,
    device: torch.device,
    num_batch_tokens: int,
    settings: ObjectiveSettings,
) -> tuple[torch.Tensor, LogprobGap]:
    """The micro-batch's loss, and the gap between the logprobs its engine reported and those
    the trainer recomputed for the importance ratio (which uses the trainer's own only)."""
    from ..rl.task import TOKENIZER

    batch = pack(samples, device=device, pad_token_id=TOKENIZER.pad_token_id)
    with torch.no_grad():
        batch.old_logprobs = grpo.token_logprobs(model, batch)
    gap = engine_logprob_gap(samples, batch.old_logprobs)
    output = grpo.compute_loss(model, batch, settings, num_tokens_total=max(num_batch_tokens, 1))
    return output.loss, gap


def group_advantages(
    samples: list[RolloutSample], *, settings: ObjectiveSettings
) -> list[RolloutSample]:
    """GRPO advantages of a whole batch (the RL core's group-relative rule), per sample."""
    groups: dict[int, list[RolloutSample]] = {}
    for sample in samples:
        groups.setdefault(sample.prompt_id, []).append(sample)
    prompt_ids = sorted(groups)
    sizes = {len(groups[p]) for p in prompt_ids}
    if len(sizes) != 1:
        raise ValueError(f"prompt groups of different sizes {sorted(sizes)} in one batch")
    ordered = [sorted(groups[p], key=lambda s: s.sample_index) for p in prompt_ids]
    rewards = torch.tensor([[s.reward for s in group] for group in ordered], dtype=torch.float64)
    advantages = grpo.group_advantages(
        rewards, normalize_std=settings.normalize_advantage_std, eps=settings.advantage_eps
    )
    out = [
        replace(sample, advantage=float(advantages[i, j]))
        for i, group in enumerate(ordered)
        for j, sample in enumerate(group)
    ]
    return sorted(out, key=lambda s: s.key)
