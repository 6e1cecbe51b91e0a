"""The trainer's forward and backward over one step's samples, at the device's pace.

Three things keep the device busy rather than waiting or padding:

- **Length buckets.** Samples are sorted by length (longest first) and cut into micro-batches
  whose padded size (rows x longest row) stays within a token budget, so a micro-batch pads each
  row only to the longest of similar rows, never to the longest of the whole batch. Longest first
  puts the peak of memory at the first micro-batch, where a size that does not fit fails at once.
- **Log-probabilities of response tokens only.** The decoder's last hidden state is taken at the
  positions that predict a response token; the output head and the log-softmax run on those rows
  alone, in chunks, each chunk recomputed in the backward pass (activation checkpointing of the
  head). So the [tokens x vocabulary] logits never exist for the whole micro-batch, which is what
  dominates memory with a 150k-token vocabulary.
- **The token budget from the memory check.** On CUDA the budget is the free device memory
  (divided among the trainers that share the device) over an estimate of the bytes a token keeps
  alive for the backward pass; a configured budget overrides it.

The loss is the RL core's GRPO objective (`rl.grpo.clipped_policy_loss_terms`) with the old
log-probabilities equal to the ones just computed, detached: the trainer recomputes the old
log-probabilities with the weights the step starts from, and every micro-batch's gradient is taken
before the step's single update, so they are the same numbers. The ratio is then exactly 1 and one
forward pass serves both. Per-step figures (loss, engine log-prob gap) stay on the device until
the step ends.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.checkpoint import checkpoint

from ..batch import RolloutSample
from ..rl import grpo
from ..rl.settings import ObjectiveSettings
from .causal_attention import mask_free_causal_attention

PLAIN_HEAD_MODEL_TYPES = frozenset({"qwen2", "qwen3", "llama", "mistral"})
"""Hugging Face model types whose causal-LM logits are the output head applied to the decoder's
last hidden state, unscaled: the types whose log-probs may be computed from that hidden state."""

LOGITS_CHUNK_BYTES = 1 << 30
"""fp32 logits of one chunk of response tokens (the head's transient memory)."""

MEMORY_CHECK_FRACTION = 0.7
"""Share of the free device memory a micro-batch may plan to use (the rest: allocator slack,
transient logits chunks, other processes on the device)."""

STAT_LOSS, STAT_GAP_SUM, STAT_GAP_TOKENS = 0, 1, 2
NUM_STATS = 3


def length_buckets(
    lengths: Sequence[int], *, max_tokens: int | None, max_rows: int | None
) -> list[list[int]]:
    """Indices of `lengths`, longest first, cut into micro-batches of at most `max_rows` rows
    whose padded size (rows x longest) stays within `max_tokens` (a longer row goes alone)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    buckets: list[list[int]] = []
    for index in order:
        if buckets:
            current = buckets[-1]
            longest = lengths[current[0]]
            fits_rows = max_rows is None or len(current) < max_rows
            fits_tokens = max_tokens is None or (len(current) + 1) * longest <= max_tokens
            if fits_rows and fits_tokens:
                current.append(index)
                continue
        buckets.append([index])
    return buckets


def activation_bytes_per_token(config: object, *, dtype_bytes: int, checkpointing: bool) -> int:
    """Bytes one token of a micro-batch keeps alive until the backward pass (an upper estimate
    for a dense decoder: per layer about 16 hidden and 6 intermediate values; with activation
    checkpointing each layer keeps its input and one layer at a time is recomputed)."""
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    inter = int(getattr(config, "intermediate_size", 0) or 4 * hidden)
    layers = int(getattr(config, "num_hidden_layers", 0) or 1)
    per_layer = dtype_bytes * (16 * hidden + 6 * inter)
    if checkpointing:
        return layers * dtype_bytes * hidden + per_layer
    return layers * per_layer


def micro_batch_token_budget(
    model: torch.nn.Module,
    device: torch.device,
    *,
    checkpointing: bool,
    sharing_trainers: int,
    free_bytes: int | None = None,
) -> int | None:
    """Tokens (rows x padded length) one micro-batch may hold on `device`; None on a CPU (the
    configured row count decides there). `free_bytes` defaults to the device's free memory."""
    if device.type != "cuda" and free_bytes is None:
        return None
    if free_bytes is None:
        index = device.index if device.index is not None else torch.cuda.current_device()
        free_bytes, _ = torch.cuda.mem_get_info(index)
    dtype_bytes = next(model.parameters()).element_size()
    per_token = activation_bytes_per_token(
        getattr(model, "config", None), dtype_bytes=dtype_bytes, checkpointing=checkpointing
    )
    usable = free_bytes * MEMORY_CHECK_FRACTION / max(sharing_trainers, 1) - LOGITS_CHUNK_BYTES
    return max(int(usable // max(per_token, 1)), 1)


def _head_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor):
    logits = head(hidden).float()
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def response_positions(samples: Sequence[RolloutSample], width: int) -> torch.Tensor:
    """Flat indices into [rows x width] of every response token, row by row (host tensor): the
    positions are known from the samples, so selecting them needs no read of the device."""
    parts = []
    for row, sample in enumerate(samples):
        if not sample.prompt_token_ids:
            raise ValueError(
                f"sample {sample.key} has an empty prompt: no token predicts its first"
            )
        first = row * width + len(sample.prompt_token_ids)
        parts.append(torch.arange(first, first + len(sample.response_token_ids)))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)


def response_logprobs(
    model: torch.nn.Module,
    batch: grpo.TrainBatch,
    positions: torch.Tensor,
    *,
    chunk_tokens: int,
) -> torch.Tensor:
    """log p of the tokens at flat `positions` (`response_positions`, on the batch's device) of
    `batch`, as one fp32 vector.

    Rows are right-padded and attention is causal, so no real token sees a pad: the model runs
    without an attention mask, which lets SDPA take its causal (flash) kernels."""
    rows, width = batch.input_ids.shape
    targets = batch.input_ids.reshape(-1).index_select(0, positions)
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    decoder = getattr(model, "base_model", None)
    if model_type not in PLAIN_HEAD_MODEL_TYPES or head is None or decoder is None:
        full = grpo.token_logprobs(model, batch)  # [rows, T], 0 at t = 0
        return full.reshape(-1).index_select(0, positions)
    with mask_free_causal_attention(model):
        hidden = decoder(input_ids=batch.input_ids, use_cache=False).last_hidden_state
    picked = hidden.reshape(rows * width, -1).index_select(0, positions - 1)
    parts = []
    for lo in range(0, picked.shape[0], chunk_tokens):
        args = (head, picked[lo : lo + chunk_tokens], targets[lo : lo + chunk_tokens])
        if torch.is_grad_enabled():
            parts.append(
                checkpoint(_head_logprobs, *args, use_reentrant=False, preserve_rng_state=False)
            )
        else:
            parts.append(_head_logprobs(*args))
    if not parts:
        return picked.new_zeros(0, dtype=torch.float32)
    return torch.cat(parts)


def logits_chunk_tokens(model: torch.nn.Module) -> int:
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 1)
    return max(LOGITS_CHUNK_BYTES // (4 * vocab), 1)


def engine_logprobs_of(
    samples: Sequence[RolloutSample], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The engine-reported log-prob of each response token (row order, as `response_logprobs`)
    and a 0/1 mask of the tokens that have one."""
    values: list[float] = []
    known: list[float] = []
    for sample in samples:
        reported = list(sample.engine_logprobs or ())[: len(sample.response_token_ids)]
        missing = len(sample.response_token_ids) - len(reported)
        values += reported + [0.0] * missing
        known += [1.0] * len(reported) + [0.0] * missing
    as_tensor = lambda xs: torch.tensor(xs, dtype=torch.float32).to(device)  # noqa: E731
    return as_tensor(values), as_tensor(known)


def microbatch_backward(
    model: torch.nn.Module,
    samples: Sequence[RolloutSample],
    batch: grpo.TrainBatch,
    *,
    num_batch_tokens: int,
    settings: ObjectiveSettings,
    stats: torch.Tensor,
) -> None:
    """Forward and backward of one micro-batch's GRPO loss (sum over its response tokens / the
    whole batch's), adding its loss and engine log-prob gap to `stats` on the device."""
    width = batch.input_ids.shape[1]
    positions = response_positions(samples, width).to(batch.input_ids.device)
    logprobs = response_logprobs(model, batch, positions, chunk_tokens=logits_chunk_tokens(model))
    per_token = [s.advantage for s in samples for _ in s.response_token_ids]
    advantages = torch.tensor(per_token, dtype=torch.float32).to(logprobs.device)
    policy, _ = grpo.clipped_policy_loss_terms(
        logprobs.unsqueeze(-1),
        logprobs.detach().unsqueeze(-1),
        advantages,
        clip_eps_low=settings.clip_eps_low,
        clip_eps_high=settings.clip_eps_high,
    )
    loss = policy.sum() / float(max(num_batch_tokens, 1))
    loss.backward()
    reported, known = engine_logprobs_of(samples, logprobs.device)
    with torch.no_grad():
        stats[STAT_LOSS] += loss.detach()
        stats[STAT_GAP_SUM] += ((logprobs.detach() - reported).abs() * known).sum()
        stats[STAT_GAP_TOKENS] += known.sum()
