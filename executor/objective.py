"""The trainer's loss on one micro-batch, normalised so that data parallelism does not change it.

Per-token log-probabilities of the responses are recomputed by the trainer; the objective is the
RL core's clipped-ratio GRPO loss. The loss of a micro-batch is the *sum* over its response tokens
divided by the response-token count of the whole step's batch (all ranks), so the gradients the
trainer group all-reduces add up to the gradient of the whole batch however it was split: the
split only changes the order of floating-point additions (docs/live-executor.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .batch import RolloutSample


def pack(
    samples: list[RolloutSample], *, device: torch.device, pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded input ids, attention mask, and a mask of the response tokens' positions.

    The response mask marks the positions whose *next-token* prediction is a response token,
    so it aligns with log-probabilities computed from logits[:, :-1].
    """
    lengths = [s.num_tokens for s in samples]
    width = max(lengths)
    ids = torch.full((len(samples), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(samples), width), dtype=torch.long)
    response = torch.zeros((len(samples), width - 1), dtype=torch.bool)
    for row, sample in enumerate(samples):
        tokens = (*sample.prompt_token_ids, *sample.response_token_ids)
        ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        attention[row, : len(tokens)] = 1
        prompt_len = len(sample.prompt_token_ids)
        response[row, prompt_len - 1 : len(tokens) - 1] = True
    return ids.to(device), attention.to(device), response.to(device)


def token_logprobs(
    model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor
) -> torch.Tensor:
    """log p(token t+1 | tokens <= t) for every position, in fp32."""
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
    return -F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    ).view(ids.shape[0], -1)


def microbatch_loss(
    model: torch.nn.Module,
    samples: list[RolloutSample],
    *,
    device: torch.device,
    num_batch_tokens: int,
    clip_eps: float = 0.2,
) -> torch.Tensor:
    """Sum of the clipped-ratio GRPO loss over the micro-batch's response tokens / batch tokens."""
    from .rl.task import TOKENIZER

    ids, attention, response = pack(samples, device=device, pad_token_id=TOKENIZER.pad_token_id)
    logprobs = token_logprobs(model, ids, attention)
    old_logprobs = logprobs.detach()  # one update per batch: the behaviour policy is the current
    advantages = torch.tensor([s.advantage for s in samples], device=device).unsqueeze(1)
    per_token = _clipped_objective(logprobs, old_logprobs, advantages, clip_eps=clip_eps)
    mask = response.to(per_token.dtype)
    return (per_token * mask).sum() / max(num_batch_tokens, 1)


def _clipped_objective(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_eps: float,
) -> torch.Tensor:
    """Per-token negative clipped surrogate (PPO/GRPO), to be minimised."""
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    return -torch.minimum(unclipped, clipped)


def group_advantages(samples: list[RolloutSample], *, eps: float = 1e-6) -> list[RolloutSample]:
    """GRPO advantages: each reward minus its prompt group's mean, over the group's std."""
    from dataclasses import replace

    groups: dict[int, list[float]] = {}
    for sample in samples:
        groups.setdefault(sample.prompt_id, []).append(sample.reward)
    stats = {}
    for prompt_id, rewards in groups.items():
        values = torch.tensor(rewards, dtype=torch.float64)
        stats[prompt_id] = (float(values.mean()), float(values.std(unbiased=False)))
    return [
        replace(s, advantage=(s.reward - stats[s.prompt_id][0]) / (stats[s.prompt_id][1] + eps))
        for s in samples
    ]
