"""Rollout stage cost: long-tail decoding under continuous batching on each rollout replica.

The model, per step:

- The batch is split over `num_replicas` replicas into contiguous chunks of equal size, as verl
  chunks a batch over its rollout ranks. When the batch does not divide evenly the first
  `n mod num_replicas` replicas take one sample more (the `numpy.array_split` rule).
- Each replica runs continuous batching with at most `C` sequences active at once (`C` from the
  KV-cache capacity, see `RolloutCostParams.max_concurrent_seqs`). Samples are admitted in order
  (FIFO) into a free slot as soon as one frees. A sample of response length `L` holds its slot
  for `L` decode iterations; every iteration takes `a + b * active` seconds and gives every active
  sequence one token. Prefill costs `prefill_s_per_token` per prompt token, paid on admission.
- The stage ends when the slowest replica ends, stretched by `replica_contention_per_extra`
  for every replica beyond the first: zero on separate GPUs; where replicas share a device or a
  host (time-slicing one GPU, one CPU), they slow each other down and this factor says how much.

Because slots are refilled the moment they free, the number of iterations a replica runs is the
makespan `T` of FIFO list scheduling of its `L`s on `C` slots, and the sum over iterations of
`active` is exactly `sum(L)`. A replica's time is therefore

    prefill_s_per_token * sum(prompt) + a * T + b * sum(L)

With unlimited concurrency `T = max(L)`. `rollout_stage_s` below computes `T` and the
active-sequence sum by simulating the slots (the reference); `rollout_stage_s_many` computes `T`
by list scheduling with a compiled kernel (or a numpy fallback). Both turn the same integers into
seconds with the same expression, so they agree exactly, not just to rounding.

Edge cases, decided here once:
- A zero-length response pays its prefill and frees its slot at once (it never decodes).
- A step with no samples, and a replica with no samples, take 0 s.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import overload

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ...traces.workload import Workload
from .rollout_kernels import KernelBackend, ReplicaCounts, replica_counts, replica_counts_many

# Defaults: a Qwen3-8B-class dense model (36 layers, 8 KV heads of dim 128, bf16 KV cache, so
# 144 KiB of KV per token) served by one 96 GB H20-class GPU per replica, vLLM-style with CUDA
# graphs. Reading 16 GB of weights at ~4 TB/s bounds an iteration below by ~4 ms; measured engines
# sit at a few times that. What is left of 0.9 x 96 GB after weights and graph/activation memory
# (~66 GB) holds ~450k KV tokens.
_DEFAULT_DECODE_BASE_S_PER_ITER = 0.015
_DEFAULT_DECODE_S_PER_ACTIVE_SEQ = 1.5e-4
_DEFAULT_PREFILL_S_PER_TOKEN = 1.5e-4
_DEFAULT_KV_CAPACITY_TOKENS = 450_000
_DEFAULT_MAX_PROMPT_TOKENS = 1_024
_DEFAULT_MAX_RESPONSE_TOKENS = 8_192


class RolloutCostParams(BaseModel):
    """Parameters of one rollout replica (one inference engine, possibly tensor-parallel)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decode_base_s_per_iter: float = Field(
        default=_DEFAULT_DECODE_BASE_S_PER_ITER,
        ge=0,
        allow_inf_nan=False,
        description="a: fixed seconds of one decode iteration, whatever the batch (weight reads, "
        "launch overhead).",
    )
    decode_s_per_active_seq: float = Field(
        default=_DEFAULT_DECODE_S_PER_ACTIVE_SEQ,
        ge=0,
        allow_inf_nan=False,
        description="b: extra seconds of one decode iteration per active sequence (KV reads, "
        "sampling).",
    )
    prefill_s_per_token: float = Field(
        default=_DEFAULT_PREFILL_S_PER_TOKEN,
        ge=0,
        allow_inf_nan=False,
        description="Seconds of prefill per prompt token, paid when a sample is admitted.",
    )
    kv_capacity_tokens_per_replica: int | None = Field(
        default=_DEFAULT_KV_CAPACITY_TOKENS,
        ge=1,
        description="KV-cache tokens one replica can hold; None means unlimited concurrency.",
    )
    kv_reserved_prompt_tokens_per_seq: int = Field(
        default=_DEFAULT_MAX_PROMPT_TOKENS,
        ge=0,
        description="Prompt tokens of KV a sequence reserves on admission (the prompt budget).",
    )
    kv_reserved_response_tokens_per_seq: int = Field(
        default=_DEFAULT_MAX_RESPONSE_TOKENS,
        ge=1,
        description="Response tokens of KV a sequence reserves on admission (the maximum "
        "response length, so that an admitted sequence always finishes without preemption).",
    )
    replica_contention_per_extra: float = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        description="Relative slowdown of the stage per replica beyond the first, where replicas "
        "share a device or host (1 = fully serialised); 0 on separate GPUs.",
    )
    first_step_warmup_s: float = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        description="Extra seconds of the first rollout of a run (engine warm-up, CUDA graph "
        "capture, allocator growth), paid once.",
    )
    max_num_seqs_per_replica: int | None = Field(
        default=None,
        ge=1,
        description="Engine cap on concurrent sequences (vLLM's max_num_seqs); None for no cap "
        "beyond the KV capacity.",
    )

    @property
    def kv_reserved_tokens_per_seq(self) -> int:
        """KV tokens one admitted sequence holds: prompt budget plus maximum response length."""
        return self.kv_reserved_prompt_tokens_per_seq + self.kv_reserved_response_tokens_per_seq

    @property
    def max_concurrent_seqs(self) -> int | None:
        """C, the most sequences a replica decodes at once; None when unlimited.

        At least one: a replica whose cache cannot hold one full reservation still decodes one
        sequence at a time rather than never.
        """
        limits = []
        if self.kv_capacity_tokens_per_replica is not None:
            per_seq = self.kv_reserved_tokens_per_seq
            limits.append(max(1, self.kv_capacity_tokens_per_replica // per_seq))
        if self.max_num_seqs_per_replica is not None:
            limits.append(self.max_num_seqs_per_replica)
        return min(limits) if limits else None


def replica_chunk_sizes(num_samples: int, num_replicas: int) -> np.ndarray:
    """Samples each replica gets: equal contiguous chunks, the first `n mod R` one larger."""
    if num_replicas < 1:
        raise ValueError(f"num_replicas must be at least 1, got {num_replicas}")
    base, extra = divmod(num_samples, num_replicas)
    sizes = np.full(num_replicas, base, dtype=np.int64)
    sizes[:extra] += 1
    return sizes


@overload
def contention_factor(num_replicas: int, params: RolloutCostParams) -> float: ...
@overload
def contention_factor(num_replicas: np.ndarray, params: RolloutCostParams) -> np.ndarray: ...
def contention_factor(
    num_replicas: int | np.ndarray, params: RolloutCostParams
) -> float | np.ndarray:
    """How much replicas that share devices stretch the slowest one's time (1 when they do not);
    elementwise for an array of replica counts."""
    extra = np.maximum(0, np.asarray(num_replicas) - 1)
    factor = 1.0 + params.replica_contention_per_extra * extra
    return float(factor) if np.ndim(factor) == 0 else factor


def replica_seconds(
    prompt_tokens_total: np.ndarray | int,
    decode_iterations: np.ndarray | int,
    active_seq_iterations: np.ndarray | int,
    params: RolloutCostParams,
) -> np.ndarray:
    """Seconds a replica takes, from its integer counts.

    The one place counts become seconds: the reference and the fast paths both call it, which is
    what makes them agree bit for bit.
    """
    return (
        params.prefill_s_per_token * np.asarray(prompt_tokens_total, dtype=np.float64)
        + params.decode_base_s_per_iter * np.asarray(decode_iterations, dtype=np.float64)
        + params.decode_s_per_active_seq * np.asarray(active_seq_iterations, dtype=np.float64)
    )


def simulate_replica_slots(
    response_tokens: np.ndarray, max_concurrent_seqs: int | None
) -> tuple[int, int]:
    """Reference simulation of one replica's decode slots.

    Returns (decode iterations, sum over iterations of active sequences). It follows the model
    literally: admit FIFO while a slot is free, run iterations, free the slots of finished
    sequences, repeat. Runs of iterations in which no sequence finishes are taken in one stride,
    since nothing changes inside them.
    """
    waiting = deque(int(x) for x in response_tokens)
    remaining: list[int] = []
    iterations = 0
    active_seq_iterations = 0
    while waiting or remaining:
        while waiting and (max_concurrent_seqs is None or len(remaining) < max_concurrent_seqs):
            length = waiting.popleft()
            if length > 0:  # a zero-length response frees its slot at admission
                remaining.append(length)
        if not remaining:
            continue
        stride = min(remaining)
        iterations += stride
        active_seq_iterations += stride * len(remaining)
        remaining = [r - stride for r in remaining if r > stride]
    return iterations, active_seq_iterations


def rollout_stage_s(
    prompt_tokens: np.ndarray,
    response_tokens: np.ndarray,
    *,
    num_replicas: int,
    params: RolloutCostParams,
) -> float:
    """Seconds the rollout stage of one step takes (reference computation, plain Python)."""
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    response = np.asarray(response_tokens, dtype=np.int64)
    if prompt.shape != response.shape or prompt.ndim != 1:
        raise ValueError("prompt_tokens and response_tokens must be 1-D arrays of equal length")
    sizes = replica_chunk_sizes(len(response), num_replicas)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    concurrency = params.max_concurrent_seqs
    slowest_s = 0.0
    for lo, hi in itertools.pairwise(bounds):
        if hi == lo:
            continue
        iterations, active = simulate_replica_slots(response[lo:hi], concurrency)
        seconds = float(replica_seconds(int(prompt[lo:hi].sum()), iterations, active, params))
        slowest_s = max(slowest_s, seconds)
    return slowest_s * contention_factor(num_replicas, params)


def rollout_stage_s_many(
    workload: Workload,
    *,
    num_replicas: int,
    params: RolloutCostParams,
    backend: KernelBackend | None = None,
) -> np.ndarray:
    """Rollout stage seconds of every step of a workload (float64, one entry per step).

    Equal, bit for bit, to calling `rollout_stage_s` on each step, and much faster: call it once
    per candidate for a whole run rather than once per step. `backend` None picks numba for large
    workloads and numpy for small ones (see `rollout_kernels.default_backend`).
    """

    counts = replica_counts(
        workload.prompt_tokens,
        workload.response_tokens,
        workload.step_offsets,
        num_replicas=num_replicas,
        max_concurrent_seqs=params.max_concurrent_seqs,
        backend=backend,
    )
    return _stage_s(counts, workload.num_steps, num_replicas, params)


def rollout_stage_s_by_replicas(
    workload: Workload,
    *,
    replica_counts_wanted: tuple[int, ...],
    params: RolloutCostParams,
    backend: KernelBackend | None = None,
) -> dict[int, np.ndarray]:
    """`rollout_stage_s_many` for each of several replica counts (the candidates' splits), by
    replica count: the same arrays, the counts of all of them computed in one pass."""
    many = replica_counts_many(
        workload.prompt_tokens,
        workload.response_tokens,
        workload.step_offsets,
        replica_counts_wanted=replica_counts_wanted,
        max_concurrent_seqs=params.max_concurrent_seqs,
        backend=backend,
    )
    return {r: _stage_s(counts, workload.num_steps, r, params) for r, counts in many.items()}


def _stage_s(
    counts: ReplicaCounts, num_steps: int, num_replicas: int, params: RolloutCostParams
) -> np.ndarray:
    """Stage seconds of every step from its replicas' counts."""
    seconds = replica_seconds(
        counts.prompt_tokens_total, counts.decode_iterations, counts.active_seq_iterations, params
    )
    if num_steps == 0:
        return np.zeros(0, dtype=np.float64)
    # Empty replicas have all-zero counts, hence 0 s; the slowest replica sets the stage time.
    slowest = seconds.reshape(num_steps, num_replicas).max(axis=1)
    return slowest * contention_factor(num_replicas, params)
