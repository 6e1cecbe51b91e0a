"""The `live:` section of a run configuration: what the Ray executor runs and on which devices.

Everything here is checked when the config is built, before Ray or torch start (this module and
what it imports need neither), so a typo or an impossible split fails in a second with an error
naming the field instead of minutes later inside a worker. The model, task, objective
and optimizer are the RL core's own config types (`rl/model_spec.py`, `rl/task.py`,
`rl/settings.py`); this module adds what only a distributed run has: devices, workers, roles,
pipelining, resizes, checkpoints.

Old keys that still read: `staging.reuse_communicators` and `staging.defer_optimizer_reload`
(now `overlapped.reuse_communicators` and `overlapped.defer_optimizer`).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dynaresize.policies.registry import PolicyConfig
from dynaresize.policies.static import StaticConfig
from dynaresize.policies.types import MEASURED_COSTS_WINDOW, Allocation
from dynaresize.traces.phases import PipelineMode, StrategyName

from .engines.config import EngineRelease, RolloutEngineConfig, read_old_rollout_engines
from .job.config import DataConfig, RewardConfig
from .placement_config import PlacementSettings
from .rl.model_spec import ModelPreset, ModelSpec
from .rl.settings import ObjectiveSettings, OptimizerSettings
from .rl.task import RepeatTask, RepeatTaskConfig


class DeviceKind(str, Enum):
    """What each worker computes on."""

    CPU = "cpu"
    """One CPU core per worker; collectives over gloo. What CI runs."""
    CUDA = "cuda"
    """CUDA devices. With fewer GPUs than workers, workers share them (gloo between ranks)."""


LIVE_PIPELINE_MODES = (PipelineMode.SYNC, PipelineMode.ONE_STEP_OFF)
"""The pipeline modes the live executor runs."""


class RolloutEngines(str, Enum):
    """The older `live.rollout_engines` values, still read as `rollout_engine.release`
    (`on_demand` is `destroy`, `resident` is `keep`); `LiveConfig.rollout_engines` gives the
    one a run's release policy corresponds to."""

    ON_DEMAND = "on_demand"
    """Built when the worker becomes a rollout replica, dropped when it becomes a trainer: no
    memory held for rollout on trainers, but every move that adds replicas starts engines."""
    RESIDENT = "resident"
    """Built on every worker at setup and kept through role changes (the weights are the model's
    own tensors, updated in place): a move that adds replicas starts none, at the price of one
    engine's cache and graphs held on every trainer. The in-process strategies (overlapped,
    host_sync) keep them; stop_and_rebuild replaces the workers at every resize, so after one its
    replicas start engines again and its trainers hold none."""


class StagingPath(str, Enum):
    """How a resize's state moves between two workers of one node (pairs on different nodes
    always go over the network, chunked through bounded buffers)."""

    AUTO = "auto"
    """Device to device when both workers have a GPU of their own, else through shared memory."""
    HOST = "host"
    """Always through host memory: shared memory on one node, gloo over host buffers between
    nodes."""
    DEVICE = "device"
    """Device to device (NCCL send/recv) between GPUs of one node, NCCL between nodes; needs one
    GPU per worker."""


class StagingSettings(BaseModel):
    """Host staging of a resize's state: the bounded pool state streams through."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: StagingPath = Field(
        default=StagingPath.AUTO,
        description="auto, host or device: how state moves between two workers of one node.",
    )

    chunk_mib: int = Field(default=256, ge=1, description="Size of one host staging buffer (MiB).")
    num_buffers: int = Field(default=2, ge=1, description="Host staging buffers in the pool.")
    pin_memory: bool = Field(
        default=True, description="Pin the staging buffers when a CUDA device is present."
    )


class OverlappedMechanisms(BaseModel):
    """Which mechanisms of the `overlapped` resize strategy are on (each can be measured alone)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reuse_communicators: bool = Field(
        default=True, description="Bind cached, background-prewarmed groups at a resize."
    )
    staging: bool = Field(
        default=True, description="Stream state through bounded host buffers (else host copies)."
    )
    defer_optimizer: bool = Field(
        default=True, description="Move optimizer moments after the boundary, before their use."
    )

    @property
    def label(self) -> str:
        on = [n for n, v in self.model_dump().items() if v]
        return "+".join(on) if on else "none"


MOVED_STAGING_KEYS = {
    "reuse_communicators": "reuse_communicators",
    "defer_optimizer_reload": "defer_optimizer",
}
"""Switches that `staging:` held before they moved to `overlapped:` (old key -> new key)."""


def _move_old_staging_keys(data: Any) -> Any:
    """`staging.reuse_communicators` and `staging.defer_optimizer_reload` still read, as
    `overlapped.reuse_communicators` and `overlapped.defer_optimizer`; both at once is an error."""
    if not isinstance(data, dict) or not isinstance(data.get("staging"), dict):
        return data
    staging = dict(data["staging"])
    moved = {new: staging.pop(old) for old, new in MOVED_STAGING_KEYS.items() if old in staging}
    if not moved:
        return data
    overlapped = data.get("overlapped", {})
    if not isinstance(overlapped, dict):
        return data  # the field's own validation names the problem
    for old, new in MOVED_STAGING_KEYS.items():
        if new in moved and new in overlapped:
            raise ValueError(
                f"staging.{old} is the old name of overlapped.{new}; give only overlapped.{new}"
            )
    return {**data, "staging": staging, "overlapped": {**overlapped, **moved}}


class LiveConfig(BaseModel):
    """A live run: model, task size, devices, workers, roles, pipelining, resizes, checkpoints."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelSpec = Field(
        default_factory=lambda: ModelSpec(preset=ModelPreset.TINY),
        description="The model: a preset, a Hugging Face config mapping or a local path; dtype; "
        "init_seed.",
    )
    task: RepeatTaskConfig = Field(
        default_factory=RepeatTaskConfig, description="The long-tail task prompts are drawn from."
    )
    policy: PolicyConfig = Field(
        default_factory=lambda: StaticConfig(),
        description="The resize policy (a `kind` picks it), the same objects the twin runs.",
    )
    device: DeviceKind = Field(default=DeviceKind.CPU, description="cpu or cuda.")
    num_workers: int = Field(default=4, ge=2, description="Workers, one device bundle each.")
    num_gpus: int = Field(
        default=1, ge=1, description="CUDA devices the workers spread over (cuda only)."
    )
    cpus_per_worker: float = Field(default=1.0, gt=0, description="CPUs reserved per worker.")
    torch_threads_per_worker: int = Field(
        default=1, ge=1, description="torch intra-op threads in each worker."
    )
    initial_allocation: Allocation = Field(
        default=Allocation(train_gpus=2, rollout_gpus=2),
        description="Starting split of the workers, TRAIN:ROLLOUT.",
    )
    candidate_allocations: tuple[Allocation, ...] = Field(
        default=(),
        description="Splits a policy may move among; empty: every split of the workers.",
    )
    num_steps: int = Field(default=6, ge=1, description="Training steps to run.")
    prompts_per_step: int = Field(default=8, ge=1, description="Prompts in one rollout batch.")
    samples_per_prompt: int = Field(
        default=4, ge=2, description="Responses per prompt (the GRPO group size)."
    )
    max_response_tokens: int = Field(default=48, ge=1, description="Cap on response length.")
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling threshold.")
    micro_batch_samples: int = Field(
        default=16,
        ge=1,
        description="Samples per forward/backward micro-batch on a trainer where no token "
        "budget applies (a CPU trainer without micro_batch_tokens).",
    )
    micro_batch_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Token budget (rows x padded length) of one micro-batch of length-bucketed "
        "samples; None: from the device's free memory on CUDA, micro_batch_samples rows on a CPU.",
    )
    activation_checkpointing: bool = Field(
        default=False,
        description="Recompute each decoder layer in the backward pass: far less activation "
        "memory for long responses, for about a third more compute.",
    )
    seed: int = Field(default=0, ge=0, description="Seed of model init, prompts and sampling.")
    pipeline: PipelineMode = Field(
        default=PipelineMode.ONE_STEP_OFF, description="sync or one_step_off."
    )
    resize_strategy: StrategyName = Field(
        default=StrategyName.OVERLAPPED,
        description="How a resize moves state; overlapped (the default) is the fastest measured "
        "(benchmarks/results/resize_cpu.md, resize_h200.md).",
    )
    rollout_engine: RolloutEngineConfig = Field(
        default_factory=RolloutEngineConfig,
        description="The rollout engine (own, hf or vllm) and what a worker does with it when "
        "it leaves Rollout (release: destroy, keep or sleep). The older `rollout_engines: "
        "on_demand | resident` still reads, as release destroy | keep.",
    )
    staging: StagingSettings = Field(
        default_factory=StagingSettings, description="Host staging settings for resizes."
    )
    overlapped: OverlappedMechanisms = Field(
        default_factory=OverlappedMechanisms,
        description="Which mechanisms of the overlapped resize strategy are on.",
    )
    objective: ObjectiveSettings = Field(
        default_factory=ObjectiveSettings, description="GRPO clipping and advantages."
    )
    optimizer: OptimizerSettings = Field(
        default_factory=OptimizerSettings, description="AdamW settings."
    )
    checkpoint_every_steps: int | None = Field(
        default=2, ge=1, description="Write a checkpoint after every N steps; None: never."
    )
    record_batches: bool = Field(
        default=False,
        description="Keep every rollout batch (tokens, rewards, lineage) under batches/ in the "
        "run folder, for a later replay.",
    )
    replay_batches_from: str | None = Field(
        default=None,
        description="Train on the batches recorded in this folder instead of generating them "
        "(the training side of two runs fed identical data can then be compared).",
    )
    recent_window_steps: int = Field(
        default=5, ge=1, description="Completed steps the policy observation carries."
    )
    measured_resize_costs_window: int = Field(
        default=MEASURED_COSTS_WINDOW,
        ge=1,
        description="Most recent measured resize costs the policy observation carries "
        "(`measured_resize_costs_s`), oldest first, and the measured costs candidate moves are "
        "priced at: a policy averaging over more of them sees at most this many.",
    )
    worker_timeout_s: float = Field(
        default=600.0, gt=0, description="Longest a single worker call may take before failing."
    )
    placement: PlacementSettings = Field(
        default_factory=PlacementSettings,
        description="Which node each worker lives on and which splits the nodes allow.",
    )
    data: DataConfig | None = Field(
        default=None,
        description="Prompt files in veRL's format (needs model.path and reward); None: the "
        "built-in repeat task.",
    )
    reward: RewardConfig | None = Field(
        default=None,
        description="The reward of each sample with `data`: a Python file's function or a "
        "built-in.",
    )
    export_hf_dir: str | None = Field(
        default=None,
        description="At the end of the run, write the trained policy here as a Hugging Face "
        "folder (needs model.path for its tokenizer); the folder must be new or empty.",
    )

    @model_validator(mode="before")
    @classmethod
    def _old_staging_keys(cls, data: Any) -> Any:
        return read_old_rollout_engines(_move_old_staging_keys(data))

    @field_validator("pipeline")
    @classmethod
    def _live_pipeline(cls, mode: PipelineMode) -> PipelineMode:
        if mode not in LIVE_PIPELINE_MODES:
            live = ", ".join(m.value for m in LIVE_PIPELINE_MODES)
            raise ValueError(f"the live executor runs {live}; {mode.value} is not one of them")
        return mode

    @field_validator("candidate_allocations", mode="before")
    @classmethod
    def _split_candidates(cls, value: Any) -> Any:
        """The command line gives the candidates as one comma-separated string."""
        return [v for v in value.split(",") if v.strip()] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _allocations_fit(self) -> LiveConfig:
        if self.initial_allocation.total_gpus != self.num_workers:
            raise ValueError(
                f"initial_allocation {self.initial_allocation} uses "
                f"{self.initial_allocation.total_gpus} workers, num_workers is {self.num_workers}"
            )
        for candidate in self.candidate_allocations:
            if candidate.total_gpus != self.num_workers:
                raise ValueError(
                    f"candidate_allocations: {candidate} uses {candidate.total_gpus} workers "
                    f"but num_workers is {self.num_workers}"
                )
        self.placement.check_fits(
            num_workers=self.num_workers,
            initial=self.initial_allocation,
            listed=self.candidate_allocations,
        )
        for entry in getattr(self.policy, "schedule", ()):
            if entry.allocation not in self.candidates:
                raise ValueError(
                    f"policy.schedule: {entry.allocation} at step {entry.step} is not among the "
                    f"candidate splits ({', '.join(a.label for a in self.candidates)})"
                )
        if self.candidate_allocations and self.initial_allocation not in self.candidate_allocations:
            raise ValueError(
                f"initial_allocation {self.initial_allocation} is not among candidate_allocations"
            )
        self._check_staging_path()
        self._check_job()
        self.rollout_engine.check_device(self.device.value)
        return self

    def _check_job(self) -> None:
        """A user's job is a model folder, prompts and a reward together; the files themselves
        are read by the driver before Ray starts (executor/job/live_job.py)."""
        if self.data is not None:
            if self.model.path is None:
                raise ValueError("data needs model.path, a model folder with its tokenizer")
            if self.reward is None:
                raise ValueError("data needs a reward (reward.path or reward.builtin)")
        elif self.reward is not None:
            raise ValueError("reward scores the prompts of `data`; give data.train_files too")
        if self.export_hf_dir is not None and self.model.path is None:
            raise ValueError(
                "export_hf_dir writes a Hugging Face folder with the tokenizer of model.path; "
                "give model.path"
            )

    def _check_staging_path(self) -> None:
        """Device-to-device moves need a GPU per worker (NCCL cannot join two ranks on one)."""
        if self.staging.path is not StagingPath.DEVICE:
            return
        if self.device is not DeviceKind.CUDA:
            raise ValueError("staging.path: device needs device: cuda")
        if self.num_gpus < self.num_workers:
            raise ValueError(
                f"staging.path: device needs a GPU per worker ({self.num_workers} workers, "
                f"num_gpus is {self.num_gpus}); use auto or host"
            )

    @property
    def device_transfers(self) -> bool:
        """Whether same-node moves go device to device: a GPU per worker and a path that allows
        it (auto or device)."""
        return (
            self.device is DeviceKind.CUDA
            and self.num_gpus >= self.num_workers
            and self.staging.path is not StagingPath.HOST
        )

    @property
    def rollout_engines(self) -> RolloutEngines:
        """The older name of the release policy: resident when engines are kept, else on
        demand (destroy and sleep both start or wake the engine on a return)."""
        if self.rollout_engine.release is EngineRelease.KEEP:
            return RolloutEngines.RESIDENT
        return RolloutEngines.ON_DEMAND

    def build_task(self) -> RepeatTask:
        return RepeatTask(self.task)

    def max_prompt_tokens(self) -> int:
        """Longest prompt the task can draw: `<bos>`, the count's digits, `*`, letter, `=`."""
        return 1 + len(str(self.task.max_count)) + 3

    @property
    def candidates(self) -> tuple[Allocation, ...]:
        """The candidate splits: every split of the workers (that the placement's split rule
        allows) when none are listed."""
        if self.candidate_allocations:
            return self.candidate_allocations
        n = self.num_workers
        every = (Allocation(train_gpus=t, rollout_gpus=n - t) for t in range(n - 1, 0, -1))
        return tuple(a for a in every if self.placement.allows(a))

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt
