"""Hugging Face `generate` behind the `RolloutEngine` interface: the baseline the sampler is
measured against, and a fallback for architectures the lean decoder does not know.

It cannot key randomness per sample: one torch generator, seeded from (seed, step), serves the
whole batch, so a sample's tokens depend on the batch it is in. `finish_s` is the call's wall
time for every sample, because `generate` does not report when each one ended.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from transformers import GenerationMixin, PreTrainedModel

from .engine import (
    FinishReason,
    GenerationOutput,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    Weights,
)
from .model import load_weights


class HFGenerateEngine:
    """`RolloutEngine` over `model.generate` with left-padded batches."""

    def __init__(self, model: PreTrainedModel, *, pad_token_id: int) -> None:
        if not isinstance(model, GenerationMixin):
            raise TypeError(f"{type(model).__name__} has no `generate` (not a generation model)")
        self.model = model
        self.pad_token_id = pad_token_id
        self.device = next(model.parameters()).device

    def load_weights(self, weights: Weights) -> None:
        load_weights(self.model, weights)

    @torch.no_grad()
    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, step: int
    ) -> GenerationOutput:
        start = time.perf_counter()
        width = max(len(r.prompt_token_ids) for r in requests)
        input_ids = torch.full((len(requests), width), self.pad_token_id, dtype=torch.int64)
        attention_mask = torch.zeros_like(input_ids)
        for i, request in enumerate(requests):
            length = len(request.prompt_token_ids)
            input_ids[i, width - length :] = torch.tensor(request.prompt_token_ids)
            attention_mask[i, width - length :] = 1
        generator_seed = (params.seed * 1_000_003 + step) % (2**63)
        torch.manual_seed(generator_seed)
        sampling = params.temperature > 0
        eos = params.eos_token_id
        output = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            max_new_tokens=params.max_new_tokens,
            min_new_tokens=params.max_new_tokens if eos is None else None,
            do_sample=sampling,
            temperature=params.temperature if sampling else None,
            top_p=params.top_p if sampling else None,
            top_k=0 if sampling else None,
            eos_token_id=eos,
            pad_token_id=self.pad_token_id,
        )
        new_tokens = output[:, width:].tolist()
        wall_s = time.perf_counter() - start
        results = [
            self._result(request, tokens, eos, wall_s)
            for request, tokens in zip(requests, new_tokens, strict=True)
        ]
        return GenerationOutput(results=results, wall_s=wall_s, prefill_s=0.0, decode_s=wall_s)

    @staticmethod
    def _result(
        request: GenerationRequest, tokens: list[int], eos: int | None, wall_s: float
    ) -> GenerationResult:
        reason = FinishReason.LENGTH
        if eos is not None and eos in tokens:
            tokens = tokens[: tokens.index(eos) + 1]
            reason = FinishReason.STOP
        return GenerationResult(
            prompt_id=request.prompt_id,
            sample_index=request.sample_index,
            token_ids=tuple(tokens),
            finish_reason=reason,
            finish_s=wall_s,
        )
