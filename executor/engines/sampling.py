"""Choosing the next token from logits with randomness keyed by the sample, not by the batch.

Every sample has a 32-bit key hashed from (seed, step, prompt id, sample index). The uniform
number that picks the token at absolute position p is a hash of (key, p): a counter-based
generator, so a sample draws the same numbers whichever replica, batch or row generates it, and
no generator state has to travel with it. Two rules turn the randomness into a token:

- `inverse_cdf`: one uniform per token, mapped through the cumulative distribution. Cheapest,
  but over a large, flat distribution each token's interval is ~1/vocab wide while rounding
  moves the cumulative sum by ~1e-7 absolute, so a last-bit change of the logits (another batch
  shape) flips the token with probability ~1e-7 x vocab per step.
- `gumbel_max`: one uniform per (token, vocabulary entry); the token is the argmax of
  logits / temperature + Gumbel noise (the Gumbel-max trick samples the same distribution). The
  top two perturbed scores are typically O(1) apart, so rounding almost never flips the choice;
  costs vocab hashes per token.

Everything is vectorised over the batch and runs unchanged inside a CUDA graph.
"""

from __future__ import annotations

from enum import Enum

import torch


class SamplingRule(str, Enum):
    INVERSE_CDF = "inverse_cdf"
    GUMBEL_MAX = "gumbel_max"


_MASK32 = 0xFFFFFFFF
_GOLDEN32 = 0x9E3779B9
_MUL_A = 0x7FEB352D
_MUL_B = 0x846CA68B


def _mul32(x: torch.Tensor, constant: int) -> torch.Tensor:
    """(x * constant) mod 2**32 for x in [0, 2**32), without ever overflowing int64."""
    low = x * (constant & 0xFFFF)
    high = ((x * (constant >> 16)) & 0xFFFF) << 16
    return (low + high) & _MASK32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer finaliser (xor-shift-multiply); int64 tensor in [0, 2**32) in and out."""
    x = x ^ (x >> 16)
    x = _mul32(x, _MUL_A)
    x = x ^ (x >> 15)
    x = _mul32(x, _MUL_B)
    return x ^ (x >> 16)


def combine(hashes: torch.Tensor, values: torch.Tensor | int) -> torch.Tensor:
    """Fold `values` into `hashes`; adding the golden-ratio constant keeps (0, 0) off 0."""
    return mix32(((hashes ^ (torch.as_tensor(values) & _MASK32)) + _GOLDEN32) & _MASK32)


def sample_keys(
    *, seed: int, step: int, prompt_ids: torch.Tensor, sample_indices: torch.Tensor
) -> torch.Tensor:
    """The per-sample keys (int64 in [0, 2**32)) of (seed, step, prompt id, sample index)."""
    base = combine(combine(torch.zeros_like(prompt_ids), seed), step)
    return combine(combine(base, prompt_ids), sample_indices)


def keyed_uniforms(keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """One float32 uniform in (0, 1) per row, from (key, position). 24 bits, so exact in fp32."""
    bits = combine(keys, positions) >> 8
    return (bits.to(torch.float32) + 0.5) * (1.0 / (1 << 24))


def keyed_token_uniforms(keys: torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """Uniforms [rows, vocab] in (0, 1), one per (key, position, token id)."""
    rows = combine(keys, positions).unsqueeze(-1)
    token_ids = torch.arange(vocab, device=keys.device).unsqueeze(0)
    bits = combine(rows, token_ids) >> 8
    return (bits.to(torch.float32) + 0.5) * (1.0 / (1 << 24))


def choose_tokens(
    logits: torch.Tensor,
    *,
    keys: torch.Tensor,
    positions: torch.Tensor,
    temperature: float,
    top_p: float,
    rule: SamplingRule = SamplingRule.INVERSE_CDF,
) -> torch.Tensor:
    """Next token per row (int64) for logits [rows, vocab] of the tokens at `positions`.

    Greedy when temperature is 0. Otherwise a draw from softmax(logits / temperature),
    restricted to the top-p nucleus when top_p < 1, by `rule` (see the module docstring).
    """
    if temperature == 0:
        return logits.argmax(dim=-1)
    if rule == SamplingRule.GUMBEL_MAX:
        return _gumbel_max(
            logits.float() / temperature, keys=keys, positions=positions, top_p=top_p
        )
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    uniforms = keyed_uniforms(keys, positions).unsqueeze(-1)
    if top_p >= 1.0:
        return _invert_cdf(probs, uniforms)
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    nucleus = torch.where(mass_before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
    return order.gather(-1, _invert_cdf(nucleus, uniforms).unsqueeze(-1)).squeeze(-1)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[token] per row (float32): the chosen tokens' log-probabilities under
    the raw distribution, before temperature and top-p, as a trainer recomputes them."""
    logits = logits.float()
    chosen = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return chosen - torch.logsumexp(logits, dim=-1)


def _invert_cdf(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Index i with cdf[i-1] <= u * total < cdf[i]; zero-weight entries are never chosen."""
    cdf = torch.cumsum(weights, dim=-1)
    targets = uniforms * cdf[..., -1:]
    index = torch.searchsorted(cdf, targets, right=True).squeeze(-1)
    return index.clamp_(max=weights.shape[-1] - 1)


def _gumbel_max(scaled_logits: torch.Tensor, *, keys, positions, top_p: float) -> torch.Tensor:
    """argmax(logits / T + Gumbel noise), over the nucleus when top_p < 1."""
    uniforms = keyed_token_uniforms(keys, positions, scaled_logits.shape[-1])
    scores = scaled_logits - torch.log(-torch.log(uniforms))
    if top_p < 1.0:
        probs = torch.softmax(scaled_logits, dim=-1)
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) < top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        scores = scores.masked_fill(~keep, float("-inf"))
    return scores.argmax(dim=-1)
