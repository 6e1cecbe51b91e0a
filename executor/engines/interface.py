"""The rollout-engine interface: what a trainer-side driver needs from any generator.

The project's own `KVCacheSampler`, Hugging Face `generate` (`HFGenerateEngine`) and vLLM
(`VLLMEngine`) implement it, so the driver does not change with the engine. Requests carry their
identity (prompt id, sample index) so that an engine can seed each sample from it and the driver
can trace every sample back to its prompt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

import torch
from pydantic import BaseModel, ConfigDict, Field


class SamplingParams(BaseModel):
    """How to sample. `temperature == 0` means greedy decoding."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(default=1.0, ge=0, description="Softmax temperature; 0 is greedy.")
    top_p: float = Field(
        default=1.0, gt=0, le=1, description="Nucleus sampling: smallest token set with this mass."
    )
    max_new_tokens: int = Field(
        default=128, ge=1, description="Cap on generated tokens per sample."
    )
    eos_token_id: int | None = Field(
        default=None, description="Token that ends a sample; None generates max_new_tokens always."
    )
    seed: int = Field(default=0, ge=0, description="Run seed; part of every sample's random key.")


@dataclass(frozen=True)
class GenerationRequest:
    """One sample to generate. (prompt_id, sample_index) must be unique within a call."""

    prompt_id: int
    sample_index: int
    prompt_token_ids: tuple[int, ...]


class FinishReason(str, Enum):
    STOP = "stop"  # the end-of-sequence token was generated (and is included in the tokens)
    LENGTH = "length"  # max_new_tokens was reached


@dataclass(frozen=True)
class GenerationResult:
    """One finished sample. `finish_s` is measured from the start of the `generate` call.

    `logprobs`, when the engine reports them, holds one entry per token of `token_ids`: the
    log-probability of that token under the model's raw distribution (log-softmax of the logits,
    before temperature and top-p), which is what a trainer recomputes to compare against.
    """

    prompt_id: int
    sample_index: int
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    finish_s: float
    logprobs: tuple[float, ...] | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass
class GenerationOutput:
    """The results of one `generate` call, in request order, with its timings."""

    results: list[GenerationResult]
    wall_s: float
    prefill_s: float
    decode_s: float
    active_batch_per_step: list[int] = field(default_factory=list)  # rows each decode step ran

    @property
    def num_generated_tokens(self) -> int:
        return sum(result.num_tokens for result in self.results)


Weights = Mapping[str, torch.Tensor] | torch.Tensor


class EngineInputError(ValueError):
    """A request does not fit the engine (too long, empty prompt, duplicate identity)."""


def check_requests(
    requests: Sequence[GenerationRequest], params: SamplingParams, *, max_seq_len: int
) -> None:
    """Raise `EngineInputError` naming the first request an engine cannot generate."""
    identities = set()
    for request in requests:
        name = f"request (prompt {request.prompt_id}, sample {request.sample_index})"
        if not request.prompt_token_ids:
            raise EngineInputError(f"{name}: empty prompt")
        total = len(request.prompt_token_ids) + params.max_new_tokens
        if total > max_seq_len:
            raise EngineInputError(
                f"{name}: prompt {len(request.prompt_token_ids)} + max_new_tokens "
                f"{params.max_new_tokens} exceeds max_seq_len {max_seq_len}"
            )
        identity = (request.prompt_id, request.sample_index)
        if identity in identities:
            raise EngineInputError(f"{name}: appears twice in one call")
        identities.add(identity)


@runtime_checkable
class RolloutEngine(Protocol):
    """Generates samples for a batch of requests and takes new weights between calls."""

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, step: int
    ) -> GenerationOutput:
        """Generate every request. `step` is the training step the batch is for; with
        `params.seed`, `prompt_id` and `sample_index` it keys each sample's randomness."""
        ...

    def load_weights(self, weights: Weights) -> None:
        """Replace the weights: a state dict (names as in `named_parameters`) or one flat tensor
        in `named_parameters` order (see `model.flatten_parameters`)."""
        ...
