"""Causal attention without a mask and without a read of the device, for the trainer's forward.

The trainer's rows are right-padded and attention is causal, so the decoder runs without an
attention mask and SDPA takes its causal (flash) kernels. Hugging Face's mask preparation still
inspects the position ids when no mask is given, looking for packed sequences, and that check reads
one boolean back to the host: a synchronisation and a device-to-host copy in every micro-batch.
Its mask preparation is skipped for attention implementations it has no mask function for, so the
trainer's forward runs under the same SDPA function registered under a name of our own, which has
none. Nothing else changes: the same function computes the same attention with `is_causal` set.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

MASK_FREE_SDPA = "dynaresize_causal_sdpa"
"""The name the SDPA attention function is registered under for the trainer's forward."""

_registered = False


def _register() -> bool:
    """Register SDPA under `MASK_FREE_SDPA` once; False where this transformers lacks the
    attention registry (the forward then keeps its own implementation)."""
    global _registered
    if _registered:
        return True
    try:
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
    except ImportError:
        return False
    AttentionInterface.register(MASK_FREE_SDPA, sdpa_attention_forward)
    _registered = True
    return True


@contextmanager
def mask_free_causal_attention(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, a model configured for SDPA runs it under `MASK_FREE_SDPA` (no mask
    preparation); other implementations and models without a config are left as they are."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa" or not _register():
        yield
        return
    config._attn_implementation = MASK_FREE_SDPA  # type: ignore[union-attr]
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"  # type: ignore[union-attr]
