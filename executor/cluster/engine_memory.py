"""`rollout_engine.release: auto`: keep an engine on every worker when the memory check says it
fits, else build it on demand; the choice and its figures go into the trace notes.

Why: a kept (resident) engine makes every move that adds replicas start none (the engine start
is the largest, least steady part of an overlapped resize), at the price of one engine's memory
held on every trainer. So the run keeps engines only where that price fits:

- own sampler and HF `generate` (in the worker's process, computing with the model's tensors):
  the KV cache of one step's samples, `samples x (longest prompt + max_response_tokens) x layers
  x kv heads x head dim x 2 (K and V) x dtype bytes`, plus the working memory of one decoding
  step, the float32 logits `samples x vocab x 4`;
- vLLM: the KV cache it reserves, `vllm.kv_cache_memory_gb` (on CPU vLLM cannot sleep, so a kept
  engine is an engine process that stays); on CUDA also its own copy of the weights and
  `vllm.activation_memory_gb`, the figures its `gpu_memory_utilization` is made of.

That is set against what the workers share: on CPU the host memory available now (psutil),
shared by every worker of the local run; on CUDA a device's memory (the smallest of the run's
devices), shared by the workers placed on it. Only `FIT_FRACTION` of it counts, because the
models, optimizer state and staging buffers are not allocated yet when the check runs (before
Ray starts). For vLLM on CUDA the choice is `sleep` rather than `keep`: every
engine is built at setup and sleeps on a trainer, holding almost nothing there. An explicit
`release` (destroy, keep, sleep) is never changed.

vLLM on CUDA is also checked to fit at all (`check_vllm_fits`): every worker on a device holding
its model and a running engine must fit in the device's memory, else the run stops before Ray
with one line naming the figures, never with vLLM's start-up error inside a worker.

A run on a cluster given by `--address` is not checked from the driver (its memory is on other
machines): `auto` means destroy there, and the note says so.

The check reads only the config (no model is built); `resolve_release` is called by `run_live`
before the cluster starts, so every worker gets the resolved release. The run folder's
`config.json` keeps `auto`, so a resume checks the memory again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dynaresize.config_io import ConfigError

from ..config import DeviceKind, LiveConfig
from ..engines.config import EngineKind, EngineRelease
from ..job.live_job import rollout_shape

FIT_FRACTION = 0.5
"""Share of the available memory the kept engines may take (the rest is left to the models,
optimizer state and staging, which are allocated after the check)."""

LOGITS_BYTES = 4
"""Bytes of one logit: the decoding step computes them in float32."""

_MIB = 1024**2
_GIB = 1024**3


@dataclass(frozen=True)
class KvShape:
    """What one token's KV cache is made of."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int
    vocab_size: int


def kv_cache_bytes(*, samples: int, seq_tokens: int, shape: KvShape) -> int:
    """KV cache of `samples` sequences of `seq_tokens` tokens: K and V for every layer."""
    return (
        samples
        * seq_tokens
        * shape.layers
        * shape.kv_heads
        * shape.head_dim
        * 2
        * shape.dtype_bytes
    )


@dataclass(frozen=True)
class EngineMemory:
    """Memory one worker's engine holds while it is kept."""

    kv_cache_bytes: int
    working_bytes: int

    @property
    def per_worker_bytes(self) -> int:
        return self.kv_cache_bytes + self.working_bytes


@dataclass(frozen=True)
class MemoryBudget:
    """Memory available to a group of workers that share it, and what it was read from."""

    available_bytes: int
    workers_sharing: int
    source: str
    """e.g. 'host memory available' or 'device memory of cuda:0'."""


@dataclass(frozen=True)
class ReleaseChoice:
    release: EngineRelease
    note: str
    """One line for the trace notes: what was chosen and why, with the figures."""


def kv_shape(live: LiveConfig) -> KvShape:
    """The model's KV dimensions, from its Hugging Face config (a preset's, the config mapping,
    or the folder's config.json; no weights are read)."""
    from ..rl.model import hf_config

    config = hf_config(live.model)
    heads = int(config.num_attention_heads)
    head_dim = getattr(config, "head_dim", None) or int(config.hidden_size) // heads
    return KvShape(
        layers=int(config.num_hidden_layers),
        kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
        head_dim=int(head_dim),
        dtype_bytes=live.model.dtype.bytes_per_param,
        vocab_size=int(config.vocab_size),
    )


def model_bytes(live: LiveConfig) -> int:
    """The model's weights in its dtype (tied ones once), counted on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    from ..rl.model import hf_config

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(hf_config(live.model))
    return sum(p.numel() for p in skeleton.parameters()) * live.model.dtype.bytes_per_param


def engine_memory(live: LiveConfig) -> EngineMemory:
    """What a kept engine of this run holds on its worker (see the module docstring)."""
    engine = live.rollout_engine
    if engine.kind is EngineKind.VLLM:
        working = 0
        if live.device is DeviceKind.CUDA:
            working = model_bytes(live) + int(engine.vllm.activation_memory_gb * _GIB)
        return EngineMemory(
            kv_cache_bytes=int(engine.vllm.kv_cache_memory_gb * _GIB), working_bytes=working
        )
    shape = kv_shape(live)
    samples = live.samples_per_step
    seq_tokens = rollout_shape(live).max_prompt_tokens + live.max_response_tokens
    return EngineMemory(
        kv_cache_bytes=kv_cache_bytes(samples=samples, seq_tokens=seq_tokens, shape=shape),
        working_bytes=samples * shape.vocab_size * LOGITS_BYTES,
    )


def local_budget(live: LiveConfig) -> MemoryBudget:
    """What the workers of a local run share: host memory available now (CPU), or the smallest
    of the run's devices' memory, shared by the workers placed on one device (CUDA)."""
    if live.device is DeviceKind.CPU:
        import psutil

        return MemoryBudget(
            available_bytes=int(psutil.virtual_memory().available),
            workers_sharing=live.num_workers,
            source="host memory available",
        )
    import torch

    # the device's total memory: asking for free memory would start a CUDA context on every
    # device in the driver's process, memory the workers then lack for the whole run
    sizes = {i: torch.cuda.get_device_properties(i).total_memory for i in range(live.num_gpus)}
    smallest = min(sizes, key=lambda i: sizes[i])
    return MemoryBudget(
        available_bytes=int(sizes[smallest]),
        workers_sharing=math.ceil(live.num_workers / live.num_gpus),
        source=f"device memory of cuda:{smallest}",
    )


def _size(num_bytes: float) -> str:
    return f"{num_bytes / _GIB:.1f} GiB" if num_bytes >= _GIB else f"{num_bytes / _MIB:.1f} MiB"


def choose_release(live: LiveConfig, memory: EngineMemory, budget: MemoryBudget) -> ReleaseChoice:
    """keep when one engine per sharing worker fits in `FIT_FRACTION` of the budget, else
    destroy; an explicit `release` is returned unchanged."""
    configured = live.rollout_engine.release
    if configured is not EngineRelease.AUTO:
        return _as_configured(configured)
    need = memory.per_worker_bytes * budget.workers_sharing
    allowed = budget.available_bytes * FIT_FRACTION
    figures = (
        f"{_size(memory.per_worker_bytes)} per worker x {budget.workers_sharing} workers = "
        f"{_size(need)}"
    )
    room = f"{FIT_FRACTION:.0%} of {_size(budget.available_bytes)} {budget.source}"
    if need <= allowed and _vllm_on_cuda(live):
        return ReleaseChoice(
            EngineRelease.SLEEP,
            f"rollout engines: asleep on trainers (sleep): {figures} fits in {room}",
        )
    if need <= allowed:
        return ReleaseChoice(
            EngineRelease.KEEP, f"rollout engines: resident (keep): {figures} fits in {room}"
        )
    return ReleaseChoice(
        EngineRelease.DESTROY,
        f"rollout engines: on demand (destroy): {figures} does not fit in {room}",
    )


def _vllm_on_cuda(live: LiveConfig) -> bool:
    return live.rollout_engine.kind is EngineKind.VLLM and live.device is DeviceKind.CUDA


def check_vllm_fits(live: LiveConfig, memory: EngineMemory, budget: MemoryBudget) -> None:
    """vLLM on CUDA: every worker sharing a device holds its model and may run an engine (its
    weights, KV cache and activations); one ConfigError line when that is more than the
    device has."""
    if not _vllm_on_cuda(live):
        return
    per_worker = model_bytes(live) + memory.per_worker_bytes
    need = per_worker * budget.workers_sharing
    if need > budget.available_bytes:
        raise ConfigError(
            f"rollout_engine.vllm: {budget.workers_sharing} workers x ({_size(per_worker)}: "
            f"model, and an engine's weights, KV cache {_size(memory.kv_cache_bytes)} and "
            f"activations) = {_size(need)} does not fit in {_size(budget.available_bytes)} "
            f"{budget.source}; lower vllm.kv_cache_memory_gb or put fewer workers on a GPU"
        )


def _as_configured(release: EngineRelease) -> ReleaseChoice:
    return ReleaseChoice(release, f"rollout engines: {release.value} (as configured)")


def resolve_release(live: LiveConfig, *, local: bool) -> tuple[LiveConfig, ReleaseChoice]:
    """The run's config with `release: auto` replaced by the choice, and the choice's note;
    a local vLLM run on CUDA that cannot fit stops here (`check_vllm_fits`)."""
    if local and _vllm_on_cuda(live):
        check_vllm_fits(live, engine_memory(live), local_budget(live))
    if live.rollout_engine.release is not EngineRelease.AUTO:
        return live, _as_configured(live.rollout_engine.release)
    if not local:
        choice = ReleaseChoice(
            EngineRelease.DESTROY,
            "rollout engines: on demand (destroy): memory not checked, the workers are on the "
            "cluster at --address (set rollout_engine.release: keep to keep them)",
        )
    else:
        choice = choose_release(live, engine_memory(live), local_budget(live))
    engine = live.rollout_engine.model_copy(update={"release": choice.release})
    return live.model_copy(update={"rollout_engine": engine}), choice
