"""vLLM behind the `RolloutEngine` interface: generation, in-place weight loads, release, rebuild.

The engine runs vLLM in the caller's process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): weights pass
to the worker as tensors, not serialised copies, and no second process re-imports vLLM. Prompts
are token ids (no tokenizer is loaded), and the model is read from a local folder, never
downloaded. vLLM is imported only when an engine is built, so the project imports without it.

What the caller gets, as from the other engines:

- Seeds: every request carries its own vLLM seed, the sample key `sampling.sample_keys` derives
  from (run seed, step, prompt id, sample index) for the own sampler. A sample's tokens therefore
  do not depend on the batch it runs in. vLLM draws with its own generator, so the tokens differ
  from the own sampler's; the key derivation is the same.
- Logprobs: vLLM's raw logprobs (`logprobs=0`): the sampled token's log-softmax before
  temperature and top-p.
- Finish times: requests are queued and the engine is stepped here, so each sample's finish time
  is when the step that finished it returned.
- Weights in place (`vllm_weights.py`, `vllm_adapter.py`): `load_weights` hands (name, tensor)
  pairs in Hugging Face names to the model on vLLM's worker (on CUDA its own `load_weights`,
  straight from device tensors; on CPU vLLM's `reload_weights`), then resets the prefix cache
  (cached KV blocks were computed with the old weights). The engine keeps the tensors given (a
  host copy of them on CPU) to load them again after a rebuild or a level-2 wake: on CUDA the
  caller keeps them unchanged until its next load (the engine process's device buffer does).
- Release: `destroy` shuts the engine down; `rebuild` starts a new one and loads the last
  weights given. On CUDA an in-process destroy returns almost none of the engine's memory and a
  second engine with sleep mode cannot start in the process, so there the engine process ends
  instead (`process.py`). `sleep` (CUDA only) calls `LLM.sleep(level)` and `rebuild` then calls
  `wake_up()`; level 2 discards the weights, so the last ones given are loaded again. On CPU
  vLLM's sleep does nothing, so `sleep` is refused there and `destroy` is the only mode.
- Memory (CUDA): the engine passes `gpu_memory_utilization` = (weights + KV cache + activations)
  / device memory (`vllm_adapter.memory_utilization`), so it starts beside trainers and other
  engines on one device; the KV cache is `kv_cache_memory_gb` exactly.
- `batch_invariant`: `VLLM_BATCH_INVARIANT=1` is set before vLLM is imported (vLLM reads it at
  import), so a sample's tokens do not depend on the batch it runs in; the engine process's
  factory sets it first thing. Without it, on CUDA, they do (docs/rollout-engines.md).

Process-wide effects of an in-process vLLM engine, undone where possible: vLLM seeds the global
random generators (their states are restored after the build), and its CPU worker replaces
`torch.set_num_threads` with a no-op and sets torch to one thread (the function is put back;
the thread count stays at `torch_threads`).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from .config import VLLM_EXTRA_HINT
from .interface import (
    FinishReason,
    GenerationOutput,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    Weights,
    check_requests,
)
from .sampling import sample_keys
from .vllm_adapter import (
    answer_dict_lookups_of_llvmlite,
    load_into_engine,
    memory_utilization,
    on_cpu,
    set_batch_invariance,
)
from .vllm_weights import named_tensors, parameter_layout


class VLLMUnavailableError(ImportError):
    """vLLM is not installed in this environment."""


class VLLMStartError(RuntimeError):
    """vLLM could not start on the configured model folder."""


class ReleaseMode(str, Enum):
    DESTROY = "destroy"  # shut the engine down and free its memory; rebuild starts a new one
    SLEEP = "sleep"  # CUDA only: LLM.sleep() parks it on the device; rebuild calls wake_up()


class VLLMEngineConfig(BaseModel):
    """How to build the vLLM engine."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_path: Path = Field(description="Local folder of a saved Hugging Face model.")
    max_model_len: int = Field(
        default=512, ge=2, description="Prompt plus generated tokens a sample can hold."
    )
    max_num_seqs: int = Field(default=256, ge=1, description="Samples decoded together at most.")
    dtype: str = Field(
        default="float32",
        description="vLLM dtype (float32, bfloat16, auto); match the trainer model for logprobs.",
    )
    kv_cache_memory_gb: float = Field(
        default=0.25, gt=0, description="Memory reserved for the KV cache, in GiB."
    )
    enforce_eager: bool = Field(
        default=True, description="Skip torch.compile and CUDA graphs (faster start, slower run)."
    )
    block_size: int | None = Field(
        default=None, ge=1, description="KV cache block size in tokens; the platform's default."
    )
    release: ReleaseMode = Field(
        default=ReleaseMode.DESTROY, description="What `release` does: destroy, or sleep (CUDA)."
    )
    sleep_level: int = Field(
        default=2, ge=1, le=2, description="vLLM sleep level: 2 drops weights, 1 offloads them."
    )
    torch_threads: int = Field(
        default=1, ge=1, description="Torch CPU threads while vLLM runs in this process."
    )
    gpu_memory_utilization: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="vLLM's start-up share of the device; None: weights + KV cache + "
        "activation_memory_gb over the device's memory (CUDA; unused on CPU).",
    )
    activation_memory_gb: float = Field(
        default=2.0, ge=0, description="Working memory allowed for activations, in GiB (CUDA)."
    )
    batch_invariant: bool = Field(
        default=False,
        description="vLLM's batch-invariant kernels (VLLM_BATCH_INVARIANT=1): a sample's tokens "
        "do not depend on its batch.",
    )


def import_vllm() -> Any:
    """The vllm module, or one clear error naming the extra to install."""
    try:
        import vllm
    except ImportError as error:
        raise VLLMUnavailableError(f"vLLM is not installed ({error}); {VLLM_EXTRA_HINT}") from error
    return vllm


def _one_line(error: Exception) -> str:
    """The gist of vLLM's error in one line: a validation error's messages, else the last
    non-empty line of the message."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        return "; ".join(str(item.get("msg", item)) for item in errors())
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


class VLLMEngine:
    """`RolloutEngine` over an in-process `vllm.LLM`, with release and rebuild."""

    def __init__(self, config: VLLMEngineConfig) -> None:
        self.config = config
        if not (config.model_path / "config.json").is_file():
            raise FileNotFoundError(f"vLLM model_path: no config.json in {config.model_path}")
        try:
            self.layout = parameter_layout(config.model_path)
        except (ValueError, KeyError, OSError) as error:
            raise ValueError(f"vLLM model_path {config.model_path}: {error}") from error
        self._last_weights: list[tuple[str, torch.Tensor]] | None = None
        self._llm: Any = None
        self._sleeping = False
        self._cpu = True
        self._calls = 0
        self.start_s = self._build()

    # -- RolloutEngine -------------------------------------------------------------------------

    def load_weights(self, weights: Weights) -> None:
        """Copy `weights` into the running engine in place, then drop its prefix cache. The
        tensors are kept (copied when on the host) so that a rebuilt engine generates with the
        same weights; device tensors are kept as given, never copied to the host."""
        pairs = named_tensors(weights, self.layout)
        self._last_weights = [
            (name, t.detach() if t.is_cuda else t.detach().to("cpu", copy=True))
            for name, t in pairs
        ]
        self._reload(pairs)

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, step: int
    ) -> GenerationOutput:
        llm = self._running()
        check_requests(requests, params, max_seq_len=self.config.max_model_len)
        start = time.perf_counter()
        keys = sample_keys(
            seed=params.seed,
            step=step,
            prompt_ids=torch.tensor([r.prompt_id for r in requests], dtype=torch.int64),
            sample_indices=torch.tensor([r.sample_index for r in requests], dtype=torch.int64),
        ).tolist()
        engine = llm.llm_engine
        self._calls += 1
        index_of: dict[str, int] = {}
        finished: dict[int, GenerationResult] = {}
        active_per_step: list[int] = []
        try:
            for i, (request, key) in enumerate(zip(requests, keys, strict=True)):
                request_id = f"{self._calls}-{i}"  # unique while the engine lives
                prompt = {"prompt_token_ids": list(request.prompt_token_ids)}
                engine.add_request(request_id, prompt, self._sampling_params(params, key))
                index_of[request_id] = i
            while engine.has_unfinished_requests():
                active_per_step.append(engine.get_num_unfinished_requests())
                for output in engine.step():
                    if output.finished:
                        i = index_of[output.request_id]
                        now_s = time.perf_counter() - start
                        finished[i] = self._result(requests[i], output, now_s)
        except BaseException:
            # leave no request of this call queued: the next call would receive its outputs
            pending = [rid for rid, i in index_of.items() if i not in finished]
            engine.abort_request(pending)
            raise
        wall_s = time.perf_counter() - start
        return GenerationOutput(
            results=[finished[i] for i in range(len(requests))],
            wall_s=wall_s,
            prefill_s=0.0,
            decode_s=wall_s,
            active_batch_per_step=active_per_step,
        )

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def is_running(self) -> bool:
        return self._llm is not None and not self._sleeping

    def release(self) -> float:
        """Free the engine (or park it, `release: sleep`); returns the seconds it took."""
        start = time.perf_counter()
        llm = self._running()
        if self.config.release is ReleaseMode.SLEEP:
            llm.sleep(level=self.config.sleep_level)
            self._sleeping = True
        else:
            self._destroy()
        return time.perf_counter() - start

    def rebuild(self) -> float:
        """Start the engine again after `release` (wake it when it sleeps) with the last weights
        loaded; returns the seconds it took."""
        if self.is_running:
            raise RuntimeError("vLLM engine: rebuild called while it is running")
        start = time.perf_counter()
        if self._sleeping:
            self._llm.wake_up()
            self._sleeping = False
            if self.config.sleep_level == 2 and self._last_weights is not None:
                self._reload(self._last_weights)
            self._reset_prefix_cache()
        else:
            self._build()
        return time.perf_counter() - start

    def forget_weights(self) -> None:
        """Drop the weights kept for a rebuild. On CUDA they are views of the worker's device
        buffer, which this process mapped by its IPC handle: the worker can free that buffer
        only once every process that mapped it has let go, so a process about to end lets go
        first (an engine process ended at a `destroy` release)."""
        self._last_weights = None

    def close(self) -> None:
        """Destroy the engine whatever the release mode (end of a run)."""
        if self._llm is not None:
            self._destroy()
        self._sleeping = False

    # -- internals -----------------------------------------------------------------------------

    def _running(self) -> Any:
        if not self.is_running:
            raise RuntimeError("vLLM engine is released; call rebuild() first")
        return self._llm

    def _build(self) -> float:
        """Start `vllm.LLM` in this process; returns the seconds it took."""
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ["HF_HUB_OFFLINE"] = "1"
        start = time.perf_counter()
        set_batch_invariance(self.config.batch_invariant)
        vllm = import_vllm()
        self._cpu = on_cpu()
        if self.config.release is ReleaseMode.SLEEP and self._cpu:
            raise ValueError(
                "vLLM release: sleep needs CUDA; vLLM's CPU backend ignores sleep, use destroy"
            )
        kwargs: dict[str, Any] = {
            "model": str(self.config.model_path),
            "skip_tokenizer_init": True,
            "generation_config": "vllm",  # sampling defaults come from here, not the folder
            "dtype": self.config.dtype,
            "max_model_len": self.config.max_model_len,
            "max_num_seqs": self.config.max_num_seqs,
            "kv_cache_memory_bytes": int(self.config.kv_cache_memory_gb * (1 << 30)),
            "enforce_eager": self.config.enforce_eager,
            "enable_sleep_mode": self.config.release is ReleaseMode.SLEEP,
        }
        if self.config.block_size is not None:
            kwargs["block_size"] = self.config.block_size
        if not self._cpu:
            kwargs["gpu_memory_utilization"] = self._memory_utilization()
        answer_dict_lookups_of_llvmlite()
        set_num_threads = torch.set_num_threads
        states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
        try:
            self._llm = vllm.LLM(**kwargs)
        except Exception as error:
            raise VLLMStartError(
                f"vLLM could not start on model folder {self.config.model_path}: {_one_line(error)}"
            ) from error
        finally:
            torch.set_num_threads = set_num_threads
            random.setstate(states[0])
            np.random.set_state(states[1])
            torch.set_rng_state(states[2])
        torch.set_num_threads(self.config.torch_threads)
        if self._last_weights is not None:
            self._reload(self._last_weights)
        return time.perf_counter() - start

    def _reload(self, pairs: Sequence[tuple[str, torch.Tensor]]) -> None:
        load_into_engine(self._running(), pairs, cpu=self._cpu)
        self._reset_prefix_cache()

    def _memory_utilization(self) -> float:
        """The configured share, else what this engine is given over the device's memory."""
        if self.config.gpu_memory_utilization is not None:
            return self.config.gpu_memory_utilization
        dtype = getattr(torch, self.config.dtype, torch.float32)
        element_bytes = torch.empty((), dtype=dtype).element_size()
        return memory_utilization(
            weights_bytes=sum(shape.numel() for _, shape in self.layout) * element_bytes,
            kv_cache_bytes=int(self.config.kv_cache_memory_gb * (1 << 30)),
            activation_bytes=int(self.config.activation_memory_gb * (1 << 30)),
            device_total_bytes=torch.cuda.get_device_properties(0).total_memory,
        )

    def _reset_prefix_cache(self) -> None:
        """Drop cached KV blocks, which hold the previous weights' keys and values."""
        if not self._llm.reset_prefix_cache():
            raise RuntimeError("vLLM could not reset its prefix cache: requests still running")

    def _destroy(self) -> None:
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        self._llm.llm_engine.engine_core.shutdown()
        self._llm = None
        cleanup_dist_env_and_memory()

    @staticmethod
    def _sampling_params(params: SamplingParams, key: int) -> Any:
        from vllm import SamplingParams as VLLMSamplingParams

        return VLLMSamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=0,
            max_tokens=params.max_new_tokens,
            # end-of-sequence is this call's token only, never the model folder's
            ignore_eos=True,
            stop_token_ids=[] if params.eos_token_id is None else [params.eos_token_id],
            seed=key,
            logprobs=0,
            detokenize=False,
        )

    @staticmethod
    def _result(request: GenerationRequest, output: Any, finish_s: float) -> GenerationResult:
        completion = output.outputs[0]
        reasons = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH}
        if completion.finish_reason not in reasons:
            raise RuntimeError(
                f"vLLM request (prompt {request.prompt_id}, sample {request.sample_index}) "
                f"ended with {completion.finish_reason!r}"
            )
        tokens = tuple(completion.token_ids)
        logprobs = tuple(
            float(step[token].logprob)
            for step, token in zip(completion.logprobs, tokens, strict=True)
        )
        return GenerationResult(
            prompt_id=request.prompt_id,
            sample_index=request.sample_index,
            token_ids=tokens,
            finish_reason=reasons[completion.finish_reason],
            finish_s=finish_s,
            logprobs=logprobs,
        )
