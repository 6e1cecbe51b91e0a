"""Build a Hugging Face causal LM from a `ModelSpec` (`model_spec.py`), never from a download.

Weights are randomly initialised from the spec's `init_seed` unless loaded from its local path,
so every worker that builds the same spec gets the same weights bit for bit.

Also here: flattening parameters into one tensor and back, so that a trainer can send all weights
to a rollout engine in one message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from .model_spec import PRESET_ARCHITECTURES, ModelDtype, ModelSpec
from .task import TOKENIZER

if TYPE_CHECKING:
    from ..engines.interface import Weights

TORCH_DTYPES: dict[ModelDtype, torch.dtype] = {
    ModelDtype.FLOAT32: torch.float32,
    ModelDtype.BFLOAT16: torch.bfloat16,
    ModelDtype.FLOAT16: torch.float16,
    ModelDtype.FLOAT64: torch.float64,
}


def hf_config(spec: ModelSpec) -> PretrainedConfig:
    """The Hugging Face config `spec` builds (for a path: the saved one)."""
    if spec.path is not None:
        if not (spec.path / "config.json").is_file():
            raise FileNotFoundError(f"model.path: no config.json in {spec.path}")
        return AutoConfig.from_pretrained(spec.path, local_files_only=True)
    if spec.config is not None:
        fields = dict(spec.config)
    else:
        fields = dict(PRESET_ARCHITECTURES[spec.resolved_preset])
    model_type = fields.pop("model_type")
    fields["vocab_size"] = spec.vocab_size or fields.get("vocab_size") or TOKENIZER.vocab_size
    fields.setdefault("bos_token_id", TOKENIZER.bos_token_id)
    fields.setdefault("eos_token_id", TOKENIZER.eos_token_id)
    fields.setdefault("pad_token_id", TOKENIZER.pad_token_id)
    try:
        return AutoConfig.for_model(model_type, **fields)
    except ValueError as error:
        raise ValueError(f"model.config: {error}") from error


def build_model(spec: ModelSpec, *, device: str | torch.device = "cpu") -> PreTrainedModel:
    """The model of `spec` on `device`, in eval mode (callers switch to train mode to train)."""
    device = torch.device(device)
    if spec.path is not None:
        hf_config(spec)  # a clear error if the directory is not a saved model
        model = AutoModelForCausalLM.from_pretrained(
            spec.path,
            local_files_only=True,
            dtype=TORCH_DTYPES[spec.dtype],
            attn_implementation=spec.attn_implementation,
        )
        # transformers wraps PreTrainedModel.to with functools.wraps, and its annotations then
        # type the bound method as unbound (a missing `self`).
        return model.to(device=device).eval()  # type: ignore[call-arg]
    config = hf_config(spec)
    config._attn_implementation = spec.attn_implementation
    with torch.random.fork_rng(devices=[]):  # weights are drawn on the CPU generator
        torch.manual_seed(spec.init_seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.to(device=device, dtype=TORCH_DTYPES[spec.dtype]).eval()


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def flatten_parameters(model: torch.nn.Module) -> torch.Tensor:
    """All parameters (tied ones once) in `named_parameters` order, as one 1-D tensor."""
    with torch.no_grad():
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def load_flat_parameters(model: torch.nn.Module, flat: torch.Tensor) -> None:
    """Inverse of `flatten_parameters`: copies in place, so views held elsewhere stay valid."""
    expected = count_parameters(model)
    if flat.ndim != 1 or flat.numel() != expected:
        raise ValueError(f"flat weights have shape {tuple(flat.shape)}, expected ({expected},)")
    offset = 0
    with torch.no_grad():
        for param in model.parameters():
            size = param.numel()
            param.copy_(flat[offset : offset + size].view_as(param))
            offset += size


def load_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy a (possibly partial-dtype) state dict into the model in place, checking names."""
    params = dict(model.named_parameters())
    unknown = sorted(set(state) - set(params))
    if unknown:
        raise ValueError(f"weights contain names the model does not have: {unknown[:5]}")
    with torch.no_grad():
        for name, tensor in state.items():
            target = params[name]
            if tuple(tensor.shape) != tuple(target.shape):
                raise ValueError(
                    f"weight {name}: shape {tuple(tensor.shape)}, expected {tuple(target.shape)}"
                )
            target.copy_(tensor)


def load_weights(model: torch.nn.Module, weights: Weights) -> None:
    """Copy `weights` (a flat tensor or a state dict) into the model in place."""
    if isinstance(weights, torch.Tensor):
        load_flat_parameters(model, weights)
    else:
        load_state(model, dict(weights))
