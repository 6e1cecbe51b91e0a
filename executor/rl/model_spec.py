"""Which model a run builds: a typed spec, checked without torch.

A `ModelSpec` names either a built-in preset (`tiny` for CPU tests, `qwen2-0.5b` and
`qwen2-1.5b` shaped like the public Qwen2 models), a config mapping of any Hugging Face causal-LM
architecture, or a local directory to load; its dtype and the seed of its random initialisation.
It is the `model:` of the `live:` section, so a configuration is validated here, before torch or
Ray start; `model.build_model` turns it into a model.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ModelPreset(str, Enum):
    TINY = "tiny"
    QWEN2_0_5B = "qwen2-0.5b"
    QWEN2_1_5B = "qwen2-1.5b"


class ModelDtype(str, Enum):
    """The dtype of the model's parameters (the trainers' master copy is float32 whatever it is)."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT64 = "float64"
    """For numerics checks on CPU."""

    @property
    def bytes_per_param(self) -> int:
        """Bytes one parameter takes in this dtype (what a weight transfer moves per element)."""
        return _BYTES_PER_PARAM[self]


_BYTES_PER_PARAM = {
    ModelDtype.FLOAT32: 4,
    ModelDtype.BFLOAT16: 2,
    ModelDtype.FLOAT16: 2,
    ModelDtype.FLOAT64: 8,
}


# Architecture of each preset. Vocabulary sizes are left out: a preset takes the task tokenizer's
# vocabulary unless the spec sets `vocab_size` (the sampler benchmark sets Qwen2's 151,936).
PRESET_ARCHITECTURES: dict[ModelPreset, dict[str, Any]] = {
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
    return dict(PRESET_ARCHITECTURES[ModelPreset(preset)])


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

    @property
    def resolved_preset(self) -> ModelPreset:
        """The preset this spec builds when neither `config` nor `path` is given."""
        return self.preset or ModelPreset.TINY
