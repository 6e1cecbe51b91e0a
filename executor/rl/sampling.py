"""Choosing the next token from logits with randomness keyed by the sample, not by the batch.

Every sample has a 32-bit key hashed from (seed, step, prompt id, sample index). The uniform
number that picks the token at absolute position p is a hash of (key, p): a counter-based
generator, so a sample draws the same numbers whichever replica, batch or row generates it, and
no generator state has to travel with it. Given the uniform, the token is found by inverting the
cumulative distribution (optionally restricted to the top-p nucleus). Everything is vectorised
over the batch and runs unchanged inside a CUDA graph.
"""

from __future__ import annotations

import torch

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


def choose_tokens(
    logits: torch.Tensor,
    *,
    keys: torch.Tensor,
    positions: torch.Tensor,
    temperature: float,
    top_p: float,
) -> torch.Tensor:
    """Next token per row (int64) for logits [rows, vocab] of the tokens at `positions`.

    Greedy when temperature is 0. Otherwise the keyed uniform is mapped through the cumulative
    distribution of softmax(logits / temperature) in token-id order or, with top_p < 1, in
    descending-probability order over the nucleus.
    """
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    uniforms = keyed_uniforms(keys, positions).unsqueeze(-1)
    if top_p >= 1.0:
        return _invert_cdf(probs, uniforms)
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    nucleus = torch.where(mass_before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
    return order.gather(-1, _invert_cdf(nucleus, uniforms).unsqueeze(-1)).squeeze(-1)


def _invert_cdf(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Index i with cdf[i-1] <= u * total < cdf[i]; zero-weight entries are never chosen."""
    cdf = torch.cumsum(weights, dim=-1)
    targets = uniforms * cdf[..., -1:]
    index = torch.searchsorted(cdf, targets, right=True).squeeze(-1)
    return index.clamp_(max=weights.shape[-1] - 1)
