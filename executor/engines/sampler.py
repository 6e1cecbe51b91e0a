"""The project's own rollout engine: batched decoding over a static KV cache.

All requests of a call are prefilled together, then decoded one token per step. A sample that
emits end-of-sequence or reaches `max_new_tokens` leaves the batch: its cache row is dropped by
moving the live rows to the front, so the rows a step computes shrink as the batch drains, as
under continuous batching. On CUDA each decode step (forward, sampling) is replayed from a CUDA
graph captured per batch-size bucket (powers of two), which removes the per-token Python and
launch overhead that dominates small-batch decoding; on CPU the same step runs eagerly with the
batch shrinking one row at a time.

Randomness is keyed per sample (see `sampling.py`), so a sample's tokens do not depend on the
batch it is generated in, up to the floating-point caveats in docs/sampler.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from pydantic import BaseModel, ConfigDict, Field
from transformers import PreTrainedModel

from ..rl.model import load_weights
from .decoder import LeanDecoder
from .interface import (
    EngineInputError,
    FinishReason,
    GenerationOutput,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    Weights,
    check_requests,
)
from .sampling import SamplingRule, choose_tokens, sample_keys, token_logprobs


class SamplerConfig(BaseModel):
    """Sizes of the static cache and whether to use CUDA graphs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_batch_size: int = Field(
        default=256, ge=1, description="Rows of the KV cache; larger calls run in waves."
    )
    max_seq_len: int = Field(
        default=512, ge=2, description="Prompt plus generated tokens a row can hold."
    )
    cuda_graphs: bool = Field(
        default=True, description="Replay decode steps from CUDA graphs (ignored off CUDA)."
    )
    prefill_chunk_rows: int = Field(
        default=64, ge=1, description="Prompts run through one prefill forward at a time."
    )
    sampling_rule: SamplingRule = Field(
        default=SamplingRule.INVERSE_CDF,
        description="How keyed randomness picks a token; gumbel_max resists rounding changes.",
    )


SamplerInputError = EngineInputError  # the name the sampler's callers know


@dataclass
class _Row:
    """One sample being generated."""

    request_index: int
    key: int
    prompt_len: int
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    @property
    def position(self) -> int:
        """Position of the last generated token."""
        return self.prompt_len + len(self.tokens) - 1


def _bucket(count: int, *, max_rows: int) -> int:
    """Smallest power of two >= count (at most max_rows): the batch sizes graphs exist for."""
    return min(1 << max(count - 1, 0).bit_length(), max_rows)


class _GraphedStep:
    """A decode step for `rows` rows captured in a CUDA graph, with static inputs."""

    def __init__(self, step: Callable, *, inputs: torch.Tensor, pool) -> None:
        # The warm-up runs really execute and write the cache at the input positions; starting
        # from the live inputs makes those writes the very ones the next replay makes.
        device = inputs.device
        self.inputs = inputs.clone()
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm up kernels and allocator before capture
                step(*self.inputs)
        torch.cuda.current_stream(device).wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.output = step(*self.inputs)

    def __call__(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.inputs.copy_(inputs, non_blocking=True)
        self.graph.replay()
        return self.output


class KVCacheSampler:
    """`RolloutEngine` over a Llama-family Hugging Face model (shared, not copied)."""

    def __init__(self, model: PreTrainedModel, config: SamplerConfig | None = None) -> None:
        self.config = config or SamplerConfig()
        self.model = model
        self.decoder = LeanDecoder(
            model, max_rows=self.config.max_batch_size, max_seq_len=self.config.max_seq_len
        )
        self.device = self.decoder.device
        self.use_graphs = self.config.cuda_graphs and self.device.type == "cuda"
        self._graphs: dict[tuple[int, float, float], _GraphedStep] = {}
        self._graph_pool = torch.cuda.graph_pool_handle() if self.use_graphs else None

    # -- RolloutEngine -------------------------------------------------------------------------

    def load_weights(self, weights: Weights) -> None:
        load_weights(self.model, weights)

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, step: int
    ) -> GenerationOutput:
        self._check(requests, params)
        start = time.perf_counter()
        output = GenerationOutput(results=[], wall_s=0.0, prefill_s=0.0, decode_s=0.0)
        wave = self.config.max_batch_size
        for first in range(0, len(requests), wave):
            self._generate_wave(requests[first : first + wave], params, step, start, output)
        output.wall_s = time.perf_counter() - start
        return output

    def warmup(self, params: SamplingParams) -> None:
        """Capture the decode graphs of every bucket now, so that timed calls do not."""
        if not self.use_graphs:
            return
        max_rows = self.config.max_batch_size
        sizes = {_bucket(count, max_rows=max_rows) for count in range(1, max_rows + 1)}
        for rows in sorted(sizes, reverse=True):
            self._graph_for(torch.zeros(3, rows, dtype=torch.int64, device=self.device), params)

    # -- internals -----------------------------------------------------------------------------

    def _check(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> None:
        check_requests(requests, params, max_seq_len=self.config.max_seq_len)

    def _generate_wave(
        self,
        requests: Sequence[GenerationRequest],
        params: SamplingParams,
        step: int,
        start: float,
        output: GenerationOutput,
    ) -> None:
        """Prefill the wave, then decode until every row has finished; results in request
        order are appended to `output`."""
        keys = sample_keys(
            seed=params.seed,
            step=step,
            prompt_ids=torch.tensor([r.prompt_id for r in requests], dtype=torch.int64),
            sample_indices=torch.tensor([r.sample_index for r in requests], dtype=torch.int64),
        ).tolist()
        rows = [
            _Row(request_index=i, key=keys[i], prompt_len=len(r.prompt_token_ids))
            for i, r in enumerate(requests)
        ]
        prefill_start = time.perf_counter()
        first_tokens, first_logprobs = self._prefill(requests, rows, params)
        for row, token, logprob in zip(rows, first_tokens, first_logprobs, strict=True):
            row.tokens.append(token)
            row.logprobs.append(logprob)
        output.prefill_s += time.perf_counter() - prefill_start
        finished: dict[int, GenerationResult] = {}
        decode_start = time.perf_counter()
        slots = self._retire(list(rows), requests, params, start, finished)
        computed = len(slots)
        while slots:
            num_live = sum(slot is not None for slot in slots)
            if self._bucket_size(num_live) < computed:  # drop finished rows from the cache
                slots, computed = self._compact(slots)
            new_tokens, new_logprobs = self._decode(slots, computed, params)
            output.active_batch_per_step.append(computed)
            for slot, token, logprob in zip(slots, new_tokens, new_logprobs, strict=False):
                if slot is not None:
                    slot.tokens.append(token)
                    slot.logprobs.append(logprob)
            slots = self._retire(slots, requests, params, start, finished)
        output.decode_s += time.perf_counter() - decode_start
        output.results.extend(finished[i] for i in range(len(requests)))

    def _bucket_size(self, count: int) -> int:
        if not self.use_graphs:
            return count
        return _bucket(count, max_rows=self.config.max_batch_size)

    def _prefill(
        self, requests: Sequence[GenerationRequest], rows: list[_Row], params: SamplingParams
    ) -> tuple[list[int], list[float]]:
        """First token of every row and its logprob; prompts go through the model
        `prefill_chunk_rows` at a time, which bounds the prefill's attention memory (rows x
        prompt length squared)."""
        tokens: list[int] = []
        logprobs: list[float] = []
        chunk = self.config.prefill_chunk_rows
        for first in range(0, len(rows), chunk):
            chunk_rows = rows[first : first + chunk]
            lengths = [row.prompt_len for row in chunk_rows]
            input_ids = torch.zeros(len(chunk_rows), max(lengths), dtype=torch.int64)
            for i, row in enumerate(chunk_rows):
                prompt = requests[row.request_index].prompt_token_ids
                input_ids[i, : lengths[i]] = torch.tensor(prompt)
            lengths_t = torch.tensor(lengths, device=self.device)
            logits = self.decoder.prefill(input_ids.to(self.device), lengths_t, first_row=first)
            chosen = choose_tokens(
                logits,
                keys=torch.tensor([row.key for row in chunk_rows], device=self.device),
                positions=lengths_t,
                temperature=params.temperature,
                top_p=params.top_p,
                rule=self.config.sampling_rule,
            )
            tokens += chosen.tolist()
            logprobs += token_logprobs(logits, chosen).tolist()
        return tokens, logprobs

    def _retire(
        self,
        rows: list[_Row | None],
        requests: Sequence[GenerationRequest],
        params: SamplingParams,
        start: float,
        finished: dict[int, GenerationResult],
    ) -> list[_Row | None]:
        """Record finished rows. A finished row stays in the list as a dead slot (None), so
        that list index = cache row until the next compaction; [] once no row is live."""
        now = time.perf_counter() - start
        kept: list[_Row | None] = []
        for row in rows:
            if row is None:
                kept.append(None)
                continue
            reason = self._finish_reason(row, params)
            if reason is None:
                kept.append(row)
                continue
            request = requests[row.request_index]
            finished[row.request_index] = GenerationResult(
                prompt_id=request.prompt_id,
                sample_index=request.sample_index,
                token_ids=tuple(row.tokens),
                finish_reason=reason,
                finish_s=now,
                logprobs=tuple(row.logprobs),
            )
            kept.append(None)
        if all(row is None for row in kept):
            return []
        return kept

    @staticmethod
    def _finish_reason(row: _Row, params: SamplingParams) -> FinishReason | None:
        if params.eos_token_id is not None and row.tokens[-1] == params.eos_token_id:
            return FinishReason.STOP
        if len(row.tokens) >= params.max_new_tokens:
            return FinishReason.LENGTH
        return None

    def _compact(self, slots: list[_Row | None]) -> tuple[list[_Row | None], int]:
        """Move the live rows' cache to rows [0, n); returns the slots and rows to compute."""
        live = [i for i, slot in enumerate(slots) if slot is not None]
        rows: list[_Row | None] = [slots[i] for i in live]
        used_len = max(row.position for row in rows if row is not None) + 1
        self.decoder.cache.compact(torch.tensor(live, device=self.device), used_len=used_len)
        return rows, self._bucket_size(len(rows))

    def _decode(
        self, slots: list[_Row | None], computed: int, params: SamplingParams
    ) -> tuple[list[int], list[float]]:
        """One decode step over cache rows [0, computed): each row's token and its logprob. Dead
        and padding rows decode a dummy token at position 0 of their own (unused) row."""
        inputs = torch.zeros(3, computed, dtype=torch.int64)
        for i, row in enumerate(slots):
            if row is not None:
                inputs[0, i], inputs[1, i], inputs[2, i] = row.tokens[-1], row.position, row.key
        if self.use_graphs:
            inputs = inputs.to(self.device)
            tokens, logprobs = self._graph_for(inputs, params)(inputs)
        else:
            attn_len = int(inputs[1].max()) + 1
            tokens, logprobs = self._step_fn(params, attn_len=attn_len)(*inputs.to(self.device))
        return tokens.tolist(), logprobs.tolist()

    def _step_fn(self, params: SamplingParams, *, attn_len: int) -> Callable:
        decoder = self.decoder

        def step(tokens: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor):
            logits = decoder.decode(tokens, positions, attn_len=attn_len)
            chosen = choose_tokens(
                logits,
                keys=keys,
                positions=positions + 1,
                temperature=params.temperature,
                top_p=params.top_p,
                rule=self.config.sampling_rule,
            )
            return chosen, token_logprobs(logits, chosen)

        return step

    def _graph_for(self, inputs: torch.Tensor, params: SamplingParams) -> _GraphedStep:
        key = (inputs.shape[1], params.temperature, params.top_p)
        if key not in self._graphs:
            step = self._step_fn(params, attn_len=self.config.max_seq_len)
            with torch.no_grad():
                self._graphs[key] = _GraphedStep(step, inputs=inputs, pool=self._graph_pool)
        return self._graphs[key]
