"""A short fingerprint of a flat weight vector: which weights an engine generated with.

A weights version is a label; a digest is evidence. The trainer that publishes weights and the
engine that loads them compute the same function over the same bytes, so a replica that kept
stale weights (or loaded a wrong or truncated buffer) shows a digest that differs from what was
published. It reads a fixed, evenly spaced sample of at most `DIGEST_SAMPLE_ELEMENTS` elements
plus the size and dtype, so it costs the same for any model (a training step changes nearly every
weight, so a sample is enough to tell two versions apart).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import torch

DIGEST_SAMPLE_ELEMENTS = 1 << 16


def weights_digest(flat: torch.Tensor, *, sample_elements: int = DIGEST_SAMPLE_ELEMENTS) -> str:
    """16 hex characters of a BLAKE2b hash over (numel, dtype, a strided sample of `flat`)."""
    if flat.ndim != 1:
        raise ValueError(f"weights_digest takes a flat tensor, got shape {tuple(flat.shape)}")
    stride = max(1, -(-flat.numel() // sample_elements))
    strided = flat[::stride].detach().to("cpu")
    # a fresh dense copy: `.contiguous()` keeps the stride of a one-element view, which torch
    # then refuses to reinterpret as bytes
    sample = torch.empty(strided.shape, dtype=strided.dtype).copy_(strided)
    digest = hashlib.blake2b(digest_size=8)
    digest.update(f"{flat.numel()}:{flat.dtype}".encode())
    digest.update(sample.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def parameters_digest(
    parameters: Iterable[torch.Tensor], *, sample_elements: int = DIGEST_SAMPLE_ELEMENTS
) -> str:
    """`weights_digest` of the concatenation of `parameters` (flattened, in order), without
    building the concatenation: a replica fingerprints the weights it generates with in place,
    with no second copy of the model."""
    tensors = [p.detach().reshape(-1) for p in parameters]
    if not tensors:
        raise ValueError("parameters_digest needs at least one parameter")
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise ValueError(f"parameters_digest takes one dtype, got {sorted(map(str, dtypes))}")
    numel = sum(t.numel() for t in tensors)
    stride = max(1, -(-numel // sample_elements))
    parts, offset = [], 0
    for tensor in tensors:
        first = (-offset) % stride  # the first global index >= offset on the stride's grid
        if first < tensor.numel():
            parts.append(tensor[first::stride].to("cpu"))
        offset += tensor.numel()
    sample = torch.cat(parts).contiguous()
    digest = hashlib.blake2b(digest_size=8)
    digest.update(f"{numel}:{tensors[0].dtype}".encode())
    digest.update(sample.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
