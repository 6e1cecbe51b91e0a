"""Build a Hugging Face causal LM from a config, never from a download.

A `ModelSpec` names either a built-in preset (`tiny` for CPU tests, `qwen2-0.5b` and
`qwen2-1.5b` shaped like the public Qwen2 models), a config dict of any Hugging Face causal-LM
architecture, or a local directory to load. Weights are randomly initialised from `init_seed`
unless loaded, so every worker that builds the same spec gets the same weights bit for bit.

Also here: flattening parameters into one tensor and back, so that a trainer can send all weights
to a rollout engine in one message.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from .engine import Weights
from .task import TOKENIZER


class ModelPreset(str, Enum):
    TINY = "tiny"
    QWEN2_0_5B = "qwen2-0.5b"
    QWEN2_1_5B = "qwen2-1.5b"


class ModelDtype(str, Enum):
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"

    @property
    def torch_dtype(self) -> torch.dtype:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
            self.value
        ]


# Architecture of each preset. Vocabulary sizes are left out: a preset takes the task tokenizer's
# vocabulary unless the spec sets `vocab_size` (the sampler benchmark sets Qwen2's 151,936).
_PRESETS: dict[ModelPreset, dict[str, Any]] = {
    ModelPreset.TINY: {
        "model_type": "qwen2",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
        "tie_word_embeddings": True,
    },
    ModelPreset.QWEN2_0_5B: {
        "model_type": "qwen2",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
    ModelPreset.QWEN2_1_5B: {
        "model_type": "qwen2",
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
}

QWEN2_VOCAB_SIZE = 151_936


def preset_architecture(preset: ModelPreset | str) -> dict[str, Any]:
    """A copy of a preset's Hugging Face config fields, to build a variant of it."""
    return dict(_PRESETS[ModelPreset(preset)])


class ModelSpec(BaseModel):
    """Which model to build. Exactly one of `preset`, `config` and `path` is set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    preset: ModelPreset | None = Field(
        default=None, description="Built-in architecture; `tiny` when nothing else is given."
    )
    config: dict[str, Any] | None = Field(
        default=None,
        description="A Hugging Face config as a dict; must contain `model_type` (e.g. `llama`).",
    )
    path: Path | None = Field(
        default=None, description="Local directory with a saved model (config and weights)."
    )
    vocab_size: int | None = Field(
        default=None,
        ge=1,
        description="Vocabulary size for a preset or config; the task tokenizer's when not set.",
    )
    dtype: ModelDtype = Field(default=ModelDtype.FLOAT32, description="Parameter dtype.")
    init_seed: int = Field(default=0, description="Seed of the random initialisation.")
    attn_implementation: str = Field(
        default="sdpa", description="Hugging Face attention kernel for training forwards."
    )

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        chosen = [name for name in ("preset", "config", "path") if getattr(self, name) is not None]
        if len(chosen) > 1:
            raise ValueError(f"model: set only one of preset, config, path (got {chosen})")
        if self.config is not None and "model_type" not in self.config:
            raise ValueError("model.config: needs a `model_type` key, e.g. 'qwen2' or 'llama'")
        if self.path is not None and self.vocab_size is not None:
            raise ValueError("model: vocab_size cannot be changed for a model loaded from path")
        return self

    def hf_config(self) -> PretrainedConfig:
        """The Hugging Face config this spec builds (for a path: the saved one)."""
        if self.path is not None:
            if not (self.path / "config.json").is_file():
                raise FileNotFoundError(f"model.path: no config.json in {self.path}")
            return AutoConfig.from_pretrained(self.path, local_files_only=True)
        fields = dict(self.config) if self.config is not None else dict(_PRESETS[self._preset()])
        model_type = fields.pop("model_type")
        fields["vocab_size"] = self.vocab_size or fields.get("vocab_size") or TOKENIZER.vocab_size
        fields.setdefault("bos_token_id", TOKENIZER.bos_token_id)
        fields.setdefault("eos_token_id", TOKENIZER.eos_token_id)
        fields.setdefault("pad_token_id", TOKENIZER.pad_token_id)
        try:
            return AutoConfig.for_model(model_type, **fields)
        except ValueError as error:
            raise ValueError(f"model.config: {error}") from error

    def _preset(self) -> ModelPreset:
        return self.preset or ModelPreset.TINY


def build_model(spec: ModelSpec, *, device: str | torch.device = "cpu") -> PreTrainedModel:
    """The model of `spec` on `device`, in eval mode (callers switch to train mode to train)."""
    device = torch.device(device)
    if spec.path is not None:
        spec.hf_config()  # a clear error if the directory is not a saved model
        model = AutoModelForCausalLM.from_pretrained(
            spec.path,
            local_files_only=True,
            dtype=spec.dtype.torch_dtype,
            attn_implementation=spec.attn_implementation,
        )
        return model.to(device).eval()
    config = spec.hf_config()
    config._attn_implementation = spec.attn_implementation
    with torch.random.fork_rng(devices=[]):  # weights are drawn on the CPU generator
        torch.manual_seed(spec.init_seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.to(device=device, dtype=spec.dtype.torch_dtype).eval()


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
