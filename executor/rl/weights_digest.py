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

import torch

DIGEST_SAMPLE_ELEMENTS = 1 << 16


def weights_digest(flat: torch.Tensor, *, sample_elements: int = DIGEST_SAMPLE_ELEMENTS) -> str:
    """16 hex characters of a BLAKE2b hash over (numel, dtype, a strided sample of `flat`)."""
    if flat.ndim != 1:
        raise ValueError(f"weights_digest takes a flat tensor, got shape {tuple(flat.shape)}")
    stride = max(1, -(-flat.numel() // sample_elements))
    sample = flat[::stride].detach().to("cpu").contiguous()
    digest = hashlib.blake2b(digest_size=8)
    digest.update(f"{flat.numel()}:{flat.dtype}".encode())
    digest.update(sample.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
