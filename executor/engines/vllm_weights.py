"""The weights of an in-process vLLM engine, in the names vLLM reloads them by.

A live worker hands its engine the model's weights as one flat vector (`rl.model`'s parameter
order) or as a state dict; vLLM's `reload_weights` takes (Hugging Face name, tensor) pairs, every
weight of a layer at once. `parameter_layout` reads the names and shapes from the model folder,
`named_tensors` cuts a flat vector (or checks a state dict) into them, and
`repack_tied_output_projection` runs on vLLM's worker after a reload, where a tied output
projection keeps a packed copy the reload does not refresh (vLLM 0.32 on CPU).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .interface import Weights


def parameter_layout(model_path: Path) -> list[tuple[str, torch.Size]]:
    """(name, shape) of the Hugging Face model's parameters in `named_parameters` order (tied
    ones once), read from the folder's config on the meta device: the order a flat weight
    tensor (`model.flatten_parameters`) follows."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path, local_files_only=True)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    return [(name, param.shape) for name, param in skeleton.named_parameters()]


def named_tensors(
    weights: Weights, layout: list[tuple[str, torch.Size]]
) -> list[tuple[str, torch.Tensor]]:
    """A complete list of (Hugging Face name, tensor) from a flat tensor or a state dict."""
    if isinstance(weights, torch.Tensor):
        expected = sum(shape.numel() for _, shape in layout)
        if weights.ndim != 1 or weights.numel() != expected:
            raise ValueError(
                f"flat weights have shape {tuple(weights.shape)}, expected ({expected},)"
            )
        pairs, offset = [], 0
        for name, shape in layout:
            pairs.append((name, weights[offset : offset + shape.numel()].view(shape)))
            offset += shape.numel()
        return pairs
    shapes = dict(layout)
    unknown = sorted(set(weights) - set(shapes))
    if unknown:
        raise ValueError(f"weights contain names the model does not have: {unknown[:5]}")
    # vLLM reloads layer by layer; a layer given only some of its tensors would be left with
    # uninitialised values, so a state dict must be complete.
    missing = [name for name in shapes if name not in weights]
    if missing:
        raise ValueError(f"vLLM needs every weight; missing {len(missing)}: {missing[:5]}")
    for name, tensor in weights.items():
        if tuple(tensor.shape) != tuple(shapes[name]):
            raise ValueError(
                f"weight {name}: shape {tuple(tensor.shape)}, expected {tuple(shapes[name])}"
            )
    return [(name, weights[name]) for name, _ in layout]


def repack_tied_output_projection(worker: Any) -> bool:
    """Runs on the vLLM worker after a reload: when the output projection shares the input
    embedding's weight, redo its post-load processing (on CPU, the packed matrix the logits are
    computed with), which the layer-wise reload skips because no tensor is named for it."""
    model = worker.model_runner.get_model()
    lm_head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if lm_head is None or embed is None:
        return False
    weight = getattr(lm_head, "weight", None)
    if weight is None or weight is not getattr(embed, "weight", None):
        return False
    lm_head.quant_method.process_weights_after_loading(lm_head)
    return True
