"""Hugging Face `generate` behind the `RolloutEngine` interface: the baseline the sampler is
measured against, and a fallback for architectures the lean decoder does not know.

Randomness is keyed per sample as in the project's sampler: a logits processor picks each token
with `sampling.choose_tokens` from the sample's key and the token's absolute position, and
`generate` then runs greedily over a distribution that has only that token left. So a sample's
tokens do not depend on the batch it is in (left padding aside, which changes the logits only by
rounding), and on the same weights HF and the own sampler draw the same samples. `finish_s` is
the call's wall time for every sample, because `generate` does not report when each one ended.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

import torch
from transformers import GenerationMixin, LogitsProcessor, LogitsProcessorList, PreTrainedModel

from ..rl.model import load_weights
from .interface import (
    FinishReason,
    GenerationOutput,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    Weights,
)
from .sampling import SamplingRule, choose_tokens, sample_keys, token_logprobs


class _KeyedChoice(LogitsProcessor):
    """Leaves only the token the sample's key chooses at this position (all others -inf)."""

    def __init__(
        self,
        *,
        keys: torch.Tensor,
        prompt_lens: torch.Tensor,
        width: int,
        params: SamplingParams,
        rule: SamplingRule,
    ) -> None:
        self.keys = keys
        self.prompt_lens = prompt_lens
        self.width = width
        self.params = params
        self.rule = rule

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        # the token being chosen sits at absolute position prompt_len + tokens generated so far
        positions = self.prompt_lens + (input_ids.shape[1] - self.width)
        chosen = choose_tokens(
            scores,
            keys=self.keys,
            positions=positions,
            temperature=self.params.temperature,
            top_p=self.params.top_p,
            rule=self.rule,
        )
        only_chosen = torch.full_like(scores, float("-inf"))
        return only_chosen.scatter_(-1, chosen.unsqueeze(-1), 0.0)


class HFGenerateEngine:
    """`RolloutEngine` over `model.generate` with left-padded batches."""

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        pad_token_id: int,
        sampling_rule: SamplingRule = SamplingRule.INVERSE_CDF,
    ) -> None:
        if not isinstance(model, GenerationMixin):
            raise TypeError(f"{type(model).__name__} has no `generate` (not a generation model)")
        self.model = model
        self.pad_token_id = pad_token_id
        self.sampling_rule = sampling_rule
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
        keyed = _KeyedChoice(
            keys=sample_keys(
                seed=params.seed,
                step=step,
                prompt_ids=torch.tensor([r.prompt_id for r in requests]),
                sample_indices=torch.tensor([r.sample_index for r in requests]),
            ).to(self.device),
            prompt_lens=attention_mask.sum(dim=1).to(self.device),
            width=width,
            params=params,
            rule=self.sampling_rule,
        )
        eos = params.eos_token_id
        # transformers' overloads of `generate` differ between releases: the dict output asked
        # for below is what every release returns here
        output: Any = cast(Any, self.model).generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            max_new_tokens=params.max_new_tokens,
            min_new_tokens=params.max_new_tokens if eos is None else None,
            do_sample=False,
            logits_processor=LogitsProcessorList([keyed]),
            eos_token_id=eos,
            pad_token_id=self.pad_token_id,
            return_dict_in_generate=True,
            output_logits=True,
        )
        new_tokens = output.sequences[:, width:]
        logprobs = token_logprobs(torch.stack(output.logits, dim=1), new_tokens).tolist()
        wall_s = time.perf_counter() - start
        results = [
            self._result(request, tokens, row_logprobs, eos, wall_s)
            for request, tokens, row_logprobs in zip(
                requests, new_tokens.tolist(), logprobs, strict=True
            )
        ]
        return GenerationOutput(results=results, wall_s=wall_s, prefill_s=0.0, decode_s=wall_s)

    @staticmethod
    def _result(
        request: GenerationRequest,
        tokens: list[int],
        logprobs: list[float],
        eos: int | None,
        wall_s: float,
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
            logprobs=tuple(logprobs[: len(tokens)]),
        )
