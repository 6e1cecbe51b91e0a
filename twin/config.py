"""The scenario a twin run simulates: cluster, model, workload, costs, pipeline and policies.

Everything is a pydantic model with units in field names and a description per field, loaded from
YAML through `dynaresize.config_io`. Validation happens when the config is built, so a bad
topology, a negative bandwidth or a memory-infeasible candidate fails before anything is
simulated, with one `ConfigError` line naming the file and the field.
"""

from __future__ import annotations

import os
from enum import Enum
from typing import Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from dynaresize.config_io import (
    ConfigError,
    format_validation_error,
    load_yaml_mapping,
    refuse_two_names,
)
from dynaresize.policies.registry import PolicyConfig
from dynaresize.policies.types import MEASURED_COSTS_WINDOW, Allocation
from dynaresize.traces.phases import PipelineMode, StrategyName
from dynaresize.traces.synthetic import WorkloadConfig, resolve_workload_spec

from .costs import CostModels
from .costs.bounds import describe_number, out_of_range
from .costs.memory import ModelConfig, check_candidate

__all__ = [
    "MAX_SIMULATED_SAMPLES",
    "MAX_SIMULATED_STEPS",
    "MAX_STREAMED_SAMPLES",
    "MAX_TOKENS_PER_SAMPLE",
    "ClusterConfig",
    "InFlightHandling",
    "ModelConfig",
    "PipelineConfig",
    "ScenarioConfig",
    "SimulationConfig",
    "load_config",
]


MAX_SIMULATED_STEPS = 1_000_000
"""Most steps one twin run simulates (every step is a few SimPy events per policy)."""

MAX_SIMULATED_SAMPLES = 50_000_000
"""Most samples one run holds at once: their lengths and the arrays that generate them take
about 40 bytes each, so about 2 GB. A run that goes sample by sample (lending, partial
rollout) holds every sample of the run; the others hold one block of steps at a time (the
workload is drawn and costed a block at a time), so for them this bounds one step."""

MAX_STREAMED_SAMPLES = 1_000_000_000
"""Most samples (steps x samples per step) of a run that holds one block of steps at a time:
its memory does not grow with them, but its time and its samples table (about 3.5 bytes a
sample on disk, once per policy) do."""

MAX_TOKENS_PER_SAMPLE = 10_000_000
"""Longest prompt or response a synthetic workload may draw (tokens); keeps token sums of a
whole run far inside 64-bit integers."""

_WORKLOAD_TOKEN_FIELDS = ("prompt_median_tokens", "max_prompt_tokens", "max_response_tokens")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _one_name_per_field(cls, data: Any) -> Any:
        """A field given under its name and its old name (candidate_topologies) is one clear
        error saying which to keep, not an 'extra input'."""
        refuse_two_names(cls, data)
        return data


class ClusterConfig(_Strict):
    """The GPUs, how they are linked and the train:rollout splits the run may use."""

    gpus_per_node: int = Field(ge=1, description="GPUs in each node.")
    num_nodes: int = Field(default=1, ge=1, description="Nodes in the cluster.")
    intra_node_bandwidth_gbps: float = Field(
        gt=0, description="GPU-to-GPU bandwidth inside a node, in gigabytes per second."
    )
    inter_node_bandwidth_gbps: float = Field(
        default=25.0, gt=0, description="Bandwidth between nodes, in gigabytes per second."
    )
    host_bandwidth_gbps: float = Field(
        default=25.0,
        gt=0,
        description="Device-to-host-to-device staging bandwidth per GPU (GB/s, pinned PCIe).",
    )
    gpu_memory_gb: float = Field(gt=0, description="Memory of one GPU (GB).")
    usable_memory_fraction: float = Field(
        default=0.92,
        gt=0,
        le=1,
        description="Share of GPU memory a framework can actually use (the rest is runtime, "
        "fragmentation and communicator buffers).",
    )
    candidate_allocations: list[Allocation] = Field(
        min_length=1,
        validation_alias=AliasChoices("candidate_allocations", "candidate_topologies"),
        description="Train:rollout splits the run may use, written as '6:2' (the older name "
        "candidate_topologies is read too; giving both is an error).",
    )
    rollout_tensor_parallel_size: int = Field(
        default=1, ge=1, description="GPUs per rollout engine replica (tensor parallel size)."
    )
    initial_allocation: Allocation = Field(description="Split the run starts on, e.g. '6:2'.")

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def usable_gpu_memory_gb(self) -> float:
        return self.gpu_memory_gb * self.usable_memory_fraction

    def weight_sync_bandwidth_gbps(self) -> float:
        """Trainer-to-rollout sync stays inside a node only when there is one node."""
        return (
            self.intra_node_bandwidth_gbps
            if self.num_nodes == 1
            else self.inter_node_bandwidth_gbps
        )

    def num_rollout_replicas(self, allocation: Allocation) -> int:
        return allocation.rollout_gpus // self.rollout_tensor_parallel_size

    @model_validator(mode="after")
    def _allocations_possible(self) -> ClusterConfig:
        seen: set[str] = set()
        for i, cand in enumerate(self.candidate_allocations):
            where = f"candidate_allocations[{i}] {cand.label}"
            if cand.label in seen:
                raise ValueError(f"{where} is listed twice")
            seen.add(cand.label)
            if cand.total_gpus != self.total_gpus:
                raise ValueError(
                    f"{where} uses {cand.total_gpus} GPUs but the cluster has {self.total_gpus} "
                    f"({self.num_nodes} node(s) x {self.gpus_per_node}); every split must use all"
                )
            if cand.rollout_gpus % self.rollout_tensor_parallel_size:
                raise ValueError(
                    f"{where}: {cand.rollout_gpus} rollout GPUs are not divisible by "
                    f"rollout_tensor_parallel_size {self.rollout_tensor_parallel_size}"
                )
        if self.initial_allocation.label not in seen:
            raise ValueError(
                f"initial_allocation {self.initial_allocation.label} is not among "
                f"candidate_allocations ({', '.join(sorted(seen))})"
            )
        return self


class InFlightHandling(str, Enum):
    DRAIN = "drain"
    """A resize waits for the rollout batch in flight to finish on the old allocation."""
    ABORT = "abort"
    """A resize aborts the rollout batch in flight; it is regenerated on the new allocation."""


class PipelineConfig(_Strict):
    """How rollout and training overlap, and how a resize treats work in flight."""

    mode: PipelineMode = Field(
        default=PipelineMode.ONE_STEP_OFF, description="sync, one_step_off or async."
    )
    max_staleness_steps: int = Field(
        default=1,
        ge=0,
        description="Async only: a batch may be generated with weights at most this many "
        "versions behind the step that trains on it.",
    )
    in_flight: InFlightHandling = Field(
        default=InFlightHandling.DRAIN,
        description="Async only: drain or abort the rollout batch in flight when resizing.",
    )
    resize_strategy: StrategyName = Field(
        default=StrategyName.OVERLAPPED,
        description="How a resize is carried out: stop_and_rebuild or overlapped.",
    )
    partial_rollout: bool = Field(
        default=False,
        description="Requests in flight on a replica that leaves Rollout are aborted with their "
        "generated tokens kept and resume on the remaining or new replicas (prefill of prompt "
        "plus kept tokens), instead of draining or aborting the whole batch (async and lending "
        "pipelines).",
    )
    lending: bool = Field(
        default=False,
        description="The trainers' GPUs hold sleeping rollout replicas that the policy may lend "
        "to Rollout while training waits (activate, serve, deactivate before the next training "
        "stage), without changing the split.",
    )
    lending_rebalance: bool = Field(
        default=True,
        description="When lent replicas join, also abort the requests in flight and spread them "
        "over every replica (veRL's rebalance; needs partial_rollout to keep their tokens); "
        "false: only requests not yet started move to the lent replicas.",
    )

    @model_validator(mode="after")
    def _partial_rollout_applies(self) -> PipelineConfig:
        """An option that would change nothing is refused, naming why."""
        if self.partial_rollout and self.mode is not PipelineMode.ASYNC and not self.lending:
            raise ValueError(
                f"pipeline.partial_rollout applies to async pipelines and to lending; with mode "
                f"{self.mode.value} and no lending nothing is in flight when GPUs change role"
            )
        if self.partial_rollout and "in_flight" in self.model_fields_set:
            raise ValueError(
                "pipeline.partial_rollout and pipeline.in_flight both say what happens to the "
                "requests in flight at a resize; give one (partial_rollout keeps their tokens, "
                "in_flight drains or aborts the whole batch)"
            )
        return self

    @field_validator("mode")
    @classmethod
    def _disaggregated(cls, mode: PipelineMode) -> PipelineMode:
        if mode is PipelineMode.COLOCATED:
            raise ValueError(
                "colocated runs are replayed from their traces, not simulated; the twin's "
                "pipelines are sync, one_step_off and async"
            )
        return mode


class SimulationConfig(_Strict):
    """Length, seed and bookkeeping of one simulated run."""

    num_steps: int = Field(default=100, ge=1, description="Training steps to simulate.")
    seed: int = Field(default=0, ge=0, description="Seed of the synthetic workload.")
    thrash_window_steps: int = Field(
        default=10,
        ge=1,
        description="A resize undone within this many steps counts as thrashing (same for "
        "every policy).",
    )
    observation_window_steps: int = Field(
        default=5,
        ge=1,
        description="Recent steps a policy sees, and over which per-candidate step times are "
        "predicted.",
    )
    measured_resize_costs_window: int = Field(
        default=MEASURED_COSTS_WINDOW,
        ge=1,
        description="Most recent measured resize costs the policy observation carries "
        "(`measured_resize_costs_s`, and a lending offer's measured switches), oldest first: a "
        "policy averaging over more of them sees at most this many.",
    )
    baseline_allocation: Allocation | None = Field(
        default=None,
        description="A named static split to report speedup against (e.g. the paper's 6:2), "
        "besides the best static split.",
    )


class ScenarioConfig(_Strict):
    """Everything one twin run needs."""

    name: str = Field(default="scenario", description="Name shown in tables and plots.")
    cluster: ClusterConfig = Field(description="GPUs, links and candidate splits.")
    model: ModelConfig = Field(description="Model size and bytes per parameter of its state.")
    workload: WorkloadConfig = Field(
        description="Synthetic workload: a preset name, a preset with overrides "
        "({preset: NAME, ...}) or a full workload config."
    )
    costs: CostModels = Field(
        default_factory=CostModels, description="Cost-model parameters (override any subset)."
    )
    pipeline: PipelineConfig = Field(
        default_factory=PipelineConfig, description="Pipeline mode and resize handling."
    )
    simulation: SimulationConfig = Field(
        default_factory=SimulationConfig, description="Steps, seed and bookkeeping."
    )
    policies: list[PolicyConfig] = Field(
        default_factory=list, description="Policies to compare (each with a `kind`)."
    )

    @field_validator("workload", mode="before")
    @classmethod
    def _resolve_workload(cls, value: Any) -> Any:
        return resolve_workload_spec(value)

    def _too_many_samples(self) -> str | None:
        """Why the run's samples do not fit, or None: a run going sample by sample holds them
        all; the others one block of steps at a time, and write them all."""
        steps, per_step = self.simulation.num_steps, self.workload.samples_per_step
        samples = steps * per_step
        product = (
            f"simulation.num_steps x workload.samples_per_step = {describe_number(steps)} x "
            f"{describe_number(per_step)} = {describe_number(samples)} samples"
        )
        if self.pipeline.lending or self.pipeline.partial_rollout:
            if samples > MAX_SIMULATED_SAMPLES:
                return (
                    f"{product}; a run that goes sample by sample (pipeline.lending or "
                    f"pipeline.partial_rollout) holds at most {MAX_SIMULATED_SAMPLES:,} "
                    "(about 2 GB)"
                )
            return None
        if per_step > MAX_SIMULATED_SAMPLES or samples > MAX_STREAMED_SAMPLES:
            return (
                f"{product}; one run holds at most {MAX_SIMULATED_SAMPLES:,} in one step "
                f"(about 2 GB) and at most {MAX_STREAMED_SAMPLES:,} in all (its samples table "
                "grows with them)"
            )
        return None

    @model_validator(mode="after")
    def _sizes_fit(self) -> ScenarioConfig:
        """Refuse, before anything is allocated, a run too large to hold or numbers too large
        to compute with, naming the field, the figure and the limit."""
        for section in ("cluster", "model"):
            problem = out_of_range(getattr(self, section), prefix=section)
            if problem is not None:
                raise ValueError(problem)
        steps = self.simulation.num_steps
        if steps > MAX_SIMULATED_STEPS:
            raise ValueError(
                f"simulation.num_steps is {describe_number(steps)}; the twin simulates at most "
                f"{MAX_SIMULATED_STEPS:,} steps in one run"
            )
        problem = self._too_many_samples()
        if problem is not None:
            raise ValueError(problem)
        for name in _WORKLOAD_TOKEN_FIELDS:
            value = getattr(self.workload, name)
            if value > MAX_TOKENS_PER_SAMPLE:
                raise ValueError(
                    f"workload.{name} is {describe_number(value)} tokens; at most "
                    f"{MAX_TOKENS_PER_SAMPLE:,} per sample"
                )
        for i, component in enumerate(self.workload.components):
            if component.median_tokens > MAX_TOKENS_PER_SAMPLE:
                raise ValueError(
                    f"workload.components.{i}.median_tokens is "
                    f"{describe_number(component.median_tokens)} tokens; at most "
                    f"{MAX_TOKENS_PER_SAMPLE:,} per sample"
                )
        return self

    @model_validator(mode="after")
    def _check(self) -> ScenarioConfig:
        for cand in self.cluster.candidate_allocations:
            check = check_candidate(
                self.model,
                label=cand.label,
                train_gpus=cand.train_gpus,
                tensor_parallel_size=self.cluster.rollout_tensor_parallel_size,
                usable_gpu_memory_gb=self.cluster.usable_gpu_memory_gb,
            )
            if not check.feasible:
                raise ValueError(check.explain())
        tp = self.cluster.rollout_tensor_parallel_size
        if self.pipeline.lending and all(
            c.train_gpus < tp for c in self.cluster.candidate_allocations
        ):
            raise ValueError(
                f"pipeline.lending: no candidate split has as many training GPUs as one rollout "
                f"replica needs (cluster.rollout_tensor_parallel_size {tp}), so none can lend"
            )
        base = self.simulation.baseline_allocation
        labels = {c.label for c in self.cluster.candidate_allocations}
        if base is not None and base.label not in labels:
            raise ValueError(
                f"simulation.baseline_allocation {base.label} is not among candidate_allocations"
            )
        return self


def load_config(path: str | os.PathLike[str]) -> ScenarioConfig:
    """Load and validate a scenario from YAML; raises ConfigError naming file and field."""
    data = load_yaml_mapping(os.fspath(path))
    try:
        return ScenarioConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, str(path))) from None
