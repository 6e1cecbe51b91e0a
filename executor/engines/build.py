"""Build the rollout engine a live run asks for (`RolloutEngineConfig`), on one worker.

Every engine comes back as a `ManagedEngine`: the `RolloutEngine` interface plus the lifecycle a
resize uses (`release` when the worker leaves Rollout, `rebuild` when it returns, `close` at the
end), each returning the seconds it took so that the worker can record it as a resize phase.

- `own` and `hf` run in the worker's process on the worker's own model (`InProcessEngine`):
  loading weights copies into that model; release drops the engine (its KV cache), rebuild makes
  a new one over the same model.
- `vllm` (and `own`/`hf` with `separate_process: true`) run in an engine process
  (`process.EngineProcess`). The engine reads its model from a folder: `model_path` when
  the run's model came from one (`live.model.path`), else the worker's current model written
  with `save_pretrained` into a folder of the run's scratch space, removed when the engine
  process ends. Either way the worker loads its current weights right after, as after any start.

The factories (`VLLMEngineFactory`, `LocalEngineFactory`) are what the engine process unpickles
and calls in the child; they hold configs only, never tensors.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch
from transformers import PreTrainedModel

from ..rl.model import build_model, load_weights
from ..rl.model_spec import ModelDtype, ModelSpec
from .config import EngineKind, EngineRelease, RolloutEngineConfig
from .hf_engine import HFGenerateEngine
from .interface import GenerationOutput, GenerationRequest, RolloutEngine, SamplingParams, Weights
from .process import EngineProcess
from .sampler import KVCacheSampler, SamplerConfig
from .vllm_adapter import set_batch_invariance
from .vllm_engine import ReleaseMode, VLLMEngine, VLLMEngineConfig, import_vllm

_folder_numbers = count()


@dataclass(frozen=True)
class EngineShape:
    """What the run asks of any engine: batch and sequence sizes, the padding token."""

    max_batch_size: int
    """Samples one `generate` call holds at most (one step's samples)."""
    max_seq_len: int
    """Longest prompt plus `max_response_tokens`."""
    pad_token_id: int
    sampler: SamplerConfig | None = None
    """The own sampler's settings beyond the sizes (CUDA graphs, sampling rule); None: defaults."""

    def sampler_config(self) -> SamplerConfig:
        base = self.sampler or SamplerConfig()
        return base.model_copy(
            update={"max_batch_size": self.max_batch_size, "max_seq_len": self.max_seq_len}
        )


@runtime_checkable
class ManagedEngine(RolloutEngine, Protocol):
    """A rollout engine with the lifecycle a resize moves it through."""

    @property
    def start_s(self) -> float:
        """Seconds the first start took."""
        ...

    @property
    def is_running(self) -> bool: ...

    def release(self) -> float:
        """Free (or park) the engine; seconds taken."""
        ...

    def rebuild(self) -> float:
        """Start it again with the current weights; seconds taken."""
        ...

    def close(self) -> None: ...


def make_local_engine(
    kind: EngineKind, model: PreTrainedModel, shape: EngineShape
) -> KVCacheSampler | HFGenerateEngine:
    """The own sampler or HF `generate` over `model` (shared, not copied)."""
    if kind is EngineKind.OWN:
        return KVCacheSampler(model, shape.sampler_config())
    if kind is EngineKind.HF:
        return HFGenerateEngine(model, pad_token_id=shape.pad_token_id)
    raise ValueError(f"{kind.value} is not an in-process engine")


class InProcessEngine:
    """The own sampler or HF `generate` in the worker's process, over the worker's model."""

    def __init__(
        self,
        kind: EngineKind,
        model: PreTrainedModel,
        shape: EngineShape,
        *,
        warmup: SamplingParams | None = None,
    ) -> None:
        self.kind = kind
        self.model = model
        self.shape = shape
        self.warmup = warmup
        self._engine: KVCacheSampler | HFGenerateEngine | None = None
        self._start_s = self.rebuild()

    @property
    def start_s(self) -> float:
        return self._start_s

    @property
    def is_running(self) -> bool:
        return self._engine is not None

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, step: int
    ) -> GenerationOutput:
        if self._engine is None:
            raise RuntimeError(f"{self.kind.value} engine is released; call rebuild() first")
        return self._engine.generate(requests, params, step=step)

    def load_weights(self, weights: Weights) -> None:
        """Into the model itself (the engine computes with its tensors), released or not."""
        load_weights(self.model, weights)

    def release(self) -> float:
        begin = time.perf_counter()
        self._engine = None
        if next(self.model.parameters()).device.type == "cuda":
            torch.cuda.empty_cache()
        return time.perf_counter() - begin

    def rebuild(self) -> float:
        if self._engine is not None:
            raise RuntimeError(f"{self.kind.value} engine: rebuild called while it is running")
        begin = time.perf_counter()
        engine = make_local_engine(self.kind, self.model, self.shape)
        if self.warmup is not None and isinstance(engine, KVCacheSampler):
            engine.warmup(self.warmup)  # captures the CUDA graphs now, not in the first step
        self._engine = engine
        return time.perf_counter() - begin

    def close(self) -> None:
        self._engine = None


@dataclass(frozen=True)
class VLLMEngineFactory:
    """Builds a `VLLMEngine` in the engine process."""

    config: VLLMEngineConfig

    def preload(self) -> None:
        set_batch_invariance(self.config.batch_invariant)  # read by vLLM at import
        import_vllm()

    def __call__(self) -> VLLMEngine:
        return VLLMEngine(self.config)


@dataclass(frozen=True)
class LocalEngineFactory:
    """Builds the own sampler or HF `generate` on a model of its own in the engine process."""

    kind: EngineKind
    model: ModelSpec
    shape: EngineShape
    device: str = "cpu"
    torch_threads: int = 1

    def __call__(self) -> KVCacheSampler | HFGenerateEngine:
        torch.set_num_threads(self.torch_threads)
        model = build_model(self.model, device=self.device)
        return make_local_engine(self.kind, model, self.shape)


def build_engine(
    config: RolloutEngineConfig,
    model: PreTrainedModel,
    *,
    shape: EngineShape,
    name: str,
    scratch_dir: Path,
    model_path: Path | None = None,
    warmup: SamplingParams | None = None,
) -> ManagedEngine:
    """The engine `config` asks for, for a worker whose model is `model`.

    `name` labels the engine process and its shared-memory buffer (the run and the worker);
    `scratch_dir` is the run's scratch folder, where a model folder is written when the engine
    needs one and `model_path` is None. The weights the engine starts with are whatever the
    folder holds: load the worker's current ones before generating.
    """
    if not config.in_child_process:
        return InProcessEngine(config.kind, model, shape, warmup=warmup)
    written = None
    if model_path is None:
        model_path = written = write_engine_model_folder(model, scratch_dir)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    try:
        if config.kind is EngineKind.VLLM:
            factory: VLLMEngineFactory | LocalEngineFactory = VLLMEngineFactory(
                vllm_engine_config(config, model_path=model_path, shape=shape, dtype=dtype)
            )
        else:
            factory = LocalEngineFactory(
                kind=config.kind,
                model=ModelSpec(path=model_path, dtype=ModelDtype(dtype)),
                shape=shape,
                device=str(next(model.parameters()).device),
                torch_threads=torch.get_num_threads(),
            )
        return EngineProcess(
            factory,
            name=name,
            start_timeout_s=config.process.start_timeout_s,
            call_timeout_s=config.process.call_timeout_s,
            shm_dir=Path(config.process.shm_dir),
            owned_paths=() if written is None else (written,),
            # on CUDA only the end of its process gives all of a vLLM engine's memory back
            end_on_release=config.kind is EngineKind.VLLM
            and config.release in (EngineRelease.DESTROY, EngineRelease.AUTO)
            and next(model.parameters()).is_cuda,
        )
    except BaseException:
        if written is not None:
            shutil.rmtree(written, ignore_errors=True)
        raise


def vllm_engine_config(
    config: RolloutEngineConfig, *, model_path: Path, shape: EngineShape, dtype: str
) -> VLLMEngineConfig:
    """The `VLLMEngine` settings of a run: its sizes unless `vllm:` overrides them."""
    settings = config.vllm
    if (settings.dtype or dtype) == "float64":
        raise ValueError("rollout_engine: vLLM does not run float64 models; set model.dtype")
    release = ReleaseMode.SLEEP if config.release is EngineRelease.SLEEP else ReleaseMode.DESTROY
    return VLLMEngineConfig(
        model_path=model_path,
        max_model_len=settings.max_model_len or shape.max_seq_len,
        max_num_seqs=settings.max_num_seqs or shape.max_batch_size,
        dtype=settings.dtype or dtype,
        kv_cache_memory_gb=settings.kv_cache_memory_gb,
        enforce_eager=settings.enforce_eager,
        block_size=settings.block_size,
        release=release,
        sleep_level=settings.sleep_level,
        torch_threads=settings.torch_threads,
        activation_memory_gb=settings.activation_memory_gb,
        batch_invariant=settings.batch_invariant,
    )


def write_engine_model_folder(model: PreTrainedModel, scratch_dir: Path) -> Path:
    """The model's current weights and config as a Hugging Face folder (`save_pretrained`) in
    `scratch_dir`, written beside its final name and renamed into place, so an engine never
    reads half a folder."""
    scratch_dir.mkdir(parents=True, exist_ok=True)
    final = scratch_dir / f"engine-model-{os.getpid()}-{next(_folder_numbers)}"
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=scratch_dir))
    try:
        save_model_folder(model, staging)
        os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def save_model_folder(model: PreTrainedModel, folder: Path) -> None:
    """The model's config and weights (one safetensors file) in `folder`, as `save_pretrained`
    lays them out, written whatever process calls it.

    Not `save_pretrained` itself: from transformers 5 on it writes nothing in a process whose
    torch.distributed rank is not 0, and a live worker is a rank of the training world. Tied
    tensors (input and output embeddings) are written once, under their first name in the state
    dict, which is the name the model's loaders read (vLLM drops the output projection of a
    tied model)."""
    from safetensors.torch import save_file

    model.config.save_pretrained(folder)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(folder)
    tensors: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        tensors[name] = tensor.detach().to("cpu").contiguous()
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
