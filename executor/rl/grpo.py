"""GRPO: group-relative advantages and the clipped-ratio policy loss, as pure functions.

Nothing here steps an optimizer or talks to other ranks: the live trainer
(`executor/worker/trainer.py`) calls `compute_loss` on its micro-batch with `num_tokens_total` set
to the response tokens of the whole global batch, sums gradients across ranks, and steps; the
result is the same as one process computing the loss over the global batch, whatever the split
(up to reduction order).

Loss of one batch (token-level mean over the global batch, as in DAPO/veRL's `token-mean`):
    ratio_t   = exp(logp_t - old_logp_t)
    policy_t  = -min(ratio_t * A, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A)
    kl_t      = exp(ref_t - logp_t) - (ref_t - logp_t) - 1        (the k3 estimator)
    loss      = sum_t (policy_t + kl_coef * kl_t) / num_tokens_total
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .settings import ObjectiveSettings


@dataclass
class TrainBatch:
    """Token tensors of one (micro-)batch of samples, each row a prompt followed by a response.

    `response_mask[i, t]` is 1 where token t of row i is a response token (its log-probability
    is trained); `advantages[i]` is the sample's advantage; `old_logprobs` (and `ref_logprobs`
    when a KL term is used) are per token, aligned with `input_ids`, 0 outside the response.
    """

    input_ids: torch.Tensor  # [rows, T] int64, right-padded
    attention_mask: torch.Tensor  # [rows, T] 1 for real tokens
    response_mask: torch.Tensor  # [rows, T] float, 1 for response tokens
    advantages: torch.Tensor  # [rows] float
    old_logprobs: torch.Tensor | None = None  # [rows, T]
    ref_logprobs: torch.Tensor | None = None  # [rows, T]

    @property
    def num_response_tokens(self) -> int:
        return int(self.response_mask.sum().item())

    @classmethod
    def pack(
        cls,
        sequences: Sequence[tuple[Sequence[int], Sequence[int]]],
        advantages: torch.Tensor,
        *,
        pad_token_id: int,
    ) -> TrainBatch:
        """Right-padded rows of (prompt, response) token ids; the response mask marks each
        row's response tokens."""
        width = max(len(prompt) + len(response) for prompt, response in sequences)
        input_ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.int64)
        attention_mask = torch.zeros(len(sequences), width, dtype=torch.int64)
        response_mask = torch.zeros(len(sequences), width, dtype=torch.float32)
        for row, (prompt, response) in enumerate(sequences):
            tokens = [*prompt, *response]
            input_ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.int64)
            attention_mask[row, : len(tokens)] = 1
            response_mask[row, len(prompt) : len(tokens)] = 1.0
        return cls(
            input_ids=input_ids,
            attention_mask=attention_mask,
            response_mask=response_mask,
            advantages=advantages,
        )

    def to(self, device: torch.device | str) -> TrainBatch:
        return self._map(lambda tensor: tensor.to(device))

    def select(self, rows: slice | torch.Tensor) -> TrainBatch:
        """The micro-batch of the given rows."""
        return self._map(lambda tensor: tensor[rows])

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> TrainBatch:
        """A batch of `fn` applied to every tensor (absent log-probs stay absent)."""
        return TrainBatch(
            input_ids=fn(self.input_ids),
            attention_mask=fn(self.attention_mask),
            response_mask=fn(self.response_mask),
            advantages=fn(self.advantages),
            old_logprobs=None if self.old_logprobs is None else fn(self.old_logprobs),
            ref_logprobs=None if self.ref_logprobs is None else fn(self.ref_logprobs),
        )


def group_advantages(
    rewards: torch.Tensor, *, normalize_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Advantages for rewards [num_prompts, num_samples]: each reward minus its group's mean,
    divided by the group's (unbiased) std plus eps when normalize_std. A group whose samples all
    got the same reward gets zero advantage: it carries no signal about which sample was better."""
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [num_prompts, num_samples], got {tuple(rewards.shape)}")
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not normalize_std:
        return centred
    if rewards.shape[1] < 2:
        raise ValueError("normalising by the group std needs at least 2 samples per prompt")
    return centred / (rewards.std(dim=1, keepdim=True) + eps)


def token_logprobs(model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    """log p(token_t | tokens_<t) for every position t >= 1 ([rows, T], 0 at t = 0), in float32."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = logprobs.gather(-1, batch.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.nn.functional.pad(picked, (1, 0))


def clipped_policy_loss_terms(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_eps_low: float,
    clip_eps_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped surrogate loss [rows, T] and a 0/1 tensor of where clipping was active."""
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages.unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high) * adv
    return -torch.minimum(unclipped, clipped), (clipped < unclipped).float()


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(policy || reference): non-negative, unbiased."""
    log_ratio = ref_logprobs - logprobs
    return torch.exp(log_ratio) - log_ratio - 1.0


@dataclass
class LossOutput:
    loss: torch.Tensor  # scalar, differentiable
    policy_loss: float
    kl: float
    clip_fraction: float
    num_tokens: int


def compute_loss(
    model: torch.nn.Module,
    batch: TrainBatch,
    settings: ObjectiveSettings,
    *,
    kl_coef: float = 0.0,
    num_tokens_total: int | None = None,
) -> LossOutput:
    """The GRPO loss of `batch`, normalised by `num_tokens_total` response tokens (the batch's own
    when None). Needs `batch.old_logprobs` (see `token_logprobs`), and `batch.ref_logprobs` when
    `kl_coef > 0` (the weight of the KL to a reference model; the live executor runs none)."""
    if batch.old_logprobs is None:
        raise ValueError("batch.old_logprobs is missing: compute them with token_logprobs first")
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    if kl_coef > 0 and batch.ref_logprobs is None:
        raise ValueError("kl_coef > 0 but batch.ref_logprobs is missing")
    mask = batch.response_mask.float()
    normaliser = float(num_tokens_total or max(batch.num_response_tokens, 1))
    logprobs = token_logprobs(model, batch)
    policy, clipped = clipped_policy_loss_terms(
        logprobs,
        batch.old_logprobs,
        batch.advantages,
        clip_eps_low=settings.clip_eps_low,
        clip_eps_high=settings.clip_eps_high,
    )
    policy_sum = (policy * mask).sum()
    loss = policy_sum / normaliser
    kl_value = 0.0
    if kl_coef > 0 and batch.ref_logprobs is not None:
        kl_sum = (kl_k3(logprobs, batch.ref_logprobs) * mask).sum()
        loss = loss + kl_coef * kl_sum / normaliser
        kl_value = kl_sum.item() / normaliser
    return LossOutput(
        loss=loss,
        policy_loss=policy_sum.item() / normaliser,
        kl=kl_value,
        clip_fraction=(clipped * mask).sum().item() / normaliser,
        num_tokens=batch.num_response_tokens,
    )
