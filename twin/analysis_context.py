"""What the trace-driven jobs (calibrate, validate, replay, break-even) take from an optional
config.

A trace says what happened; to ask "what if" these jobs also need the cluster (candidate
splits, links, tensor-parallel size), the model (bytes per parameter), the pipeline mode and base
cost parameters: a twin scenario. With a config it is that scenario (the command line resolves
`--config NAME` and hands it over; a path is read as a scenario YAML file); without, it is built
from the trace's metadata and stated defaults, each default named in `assumptions` so the output
can say what was assumed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from dynaresize.config_io import ConfigError

from ..policies.types import Allocation
from ..traces.io import Trace
from ..traces.phases import PipelineMode
from .config import ClusterConfig, ScenarioConfig, load_config
from .costs import CostModels, load_costs
from .costs.memory import ModelConfig, check_candidate

DEFAULT_MODEL_PARAMS_B = 8.0
"""Model size assumed when neither a config nor the trace says it (the paper's Qwen3-8B)."""
DEFAULT_SYNC_BANDWIDTH_GBPS = 400.0
"""Trainer-to-rollout link assumed without a config: NVLink-class, inside one node."""
DEFAULT_GPU_MEMORY_GB = 96.0
"""GPU memory assumed without a config or a known GPU type (the paper's H20)."""
GPU_MEMORY_GB = {"H20": 96.0, "H100": 80.0, "H800": 80.0, "H200": 141.0, "A100": 80.0}

_USABLE_MEMORY_FRACTION = ClusterConfig.model_fields["usable_memory_fraction"].default


def _simulated_mode(mode: PipelineMode) -> PipelineMode:
    """What-ifs of a colocated run are disaggregated; one-step-off is the usual such setup."""
    return PipelineMode.ONE_STEP_OFF if mode is PipelineMode.COLOCATED else mode


@dataclass(frozen=True)
class AnalysisContext:
    """A twin scenario for the traced job, and what had to be assumed to build it."""

    scenario: ScenarioConfig
    from_config: bool
    assumptions: list[str] = field(default_factory=list)

    @property
    def model(self) -> ModelConfig:
        return self.scenario.model

    @property
    def costs(self) -> CostModels:
        return self.scenario.costs

    @property
    def candidates(self) -> tuple[Allocation, ...]:
        return tuple(self.scenario.cluster.candidate_allocations)

    @property
    def initial(self) -> Allocation:
        return self.scenario.cluster.initial_allocation

    @property
    def total_gpus(self) -> int:
        return self.scenario.cluster.total_gpus

    @property
    def rollout_tp_size(self) -> int:
        return self.scenario.cluster.rollout_tensor_parallel_size

    @property
    def sync_bandwidth_gbps(self) -> float:
        return self.scenario.cluster.weight_sync_bandwidth_gbps()

    def with_costs(self, costs: CostModels) -> AnalysisContext:
        return replace(self, scenario=self.scenario.model_copy(update={"costs": costs}))

    def scenario_for_steps(self, num_steps: int) -> ScenarioConfig:
        simulation = self.scenario.simulation.model_copy(update={"num_steps": max(1, num_steps)})
        return self.scenario.model_copy(update={"simulation": simulation})


def context_from_config(
    config: ScenarioConfig | str | os.PathLike[str] | None,
    traces: list[Trace],
    *,
    costs_path: str | os.PathLike[str] | None = None,
) -> AnalysisContext:
    """The context of `config` (a scenario, or the path of a scenario YAML file) when given,
    else one built from the traces' metadata and defaults. `costs_path` overrides its costs."""
    if isinstance(config, ScenarioConfig):
        context = AnalysisContext(config, from_config=True)
    elif config is not None:
        context = AnalysisContext(load_config(config), from_config=True)
    else:
        context = _context_from_traces(traces)
    if costs_path is not None:
        context = context.with_costs(load_costs(costs_path, base=context.costs))
    return context


def _start_allocation(traces: list[Trace], assumptions: list[str]) -> Allocation:
    meta = traces[0].meta if traces else None
    train: int | None
    rollout: int | None
    if meta is not None and meta.pipeline_mode is PipelineMode.COLOCATED:
        first = traces[0].steps.iloc[0] if len(traces[0].steps) else None
        total = meta.num_gpus or (int(first["train_gpus"]) if first is not None else 8)
        train, rollout = total - total // 2, total // 2
        assumptions.append(
            f"colocated run: compared with disaggregated one-step-off splits of its {total} "
            f"GPUs, starting from {train}:{rollout}"
        )
        return Allocation(train_gpus=train, rollout_gpus=rollout)
    train = meta.start_train_gpus if meta else None
    rollout = meta.start_rollout_gpus if meta else None
    if not (train and rollout) and traces and len(traces[0].steps):
        first = traces[0].steps.iloc[0]
        train, rollout = int(first["train_gpus"]), int(first["rollout_gpus"])
    if train and rollout:
        return Allocation(train_gpus=train, rollout_gpus=rollout)
    total = (meta.num_gpus if meta and meta.num_gpus else None) or (train or 0) + (rollout or 0)
    total = total if total >= 2 else 8
    train, rollout = total - total // 2, total // 2
    assumptions.append(f"the trace shows no disaggregated split: assumed {train}:{rollout}")
    return Allocation(train_gpus=train, rollout_gpus=rollout)


def _context_from_traces(traces: list[Trace]) -> AnalysisContext:
    assumptions: list[str] = []
    meta = traces[0].meta if traces else None
    initial = _start_allocation(traces, assumptions)
    total = initial.total_gpus
    size = next((t.meta.model_params_b for t in traces if t.meta.model_params_b), None)
    if size is None:
        size = DEFAULT_MODEL_PARAMS_B
        assumptions.append(f"model size not given: assumed {size:g}B parameters")
    model = ModelConfig(num_params_b=size)
    gpu_type = (meta.gpu_type or "").upper() if meta else ""
    memory_gb = GPU_MEMORY_GB.get(gpu_type)
    if memory_gb is None:
        memory_gb = DEFAULT_GPU_MEMORY_GB
        assumptions.append(f"GPU memory not known: assumed {memory_gb:g} GB per GPU")
    assumptions.append(
        f"weight-sync link not given: assumed {DEFAULT_SYNC_BANDWIDTH_GBPS:g} GB/s (one node)"
    )
    candidates: list[str] = []
    dropped: list[str] = []
    for train in range(total - 1, 0, -1):
        label = f"{train}:{total - train}"
        check = check_candidate(
            model,
            label=label,
            train_gpus=train,
            tensor_parallel_size=1,
            usable_gpu_memory_gb=memory_gb * _USABLE_MEMORY_FRACTION,
        )
        (candidates if check.feasible else dropped).append(label)
    if initial.label not in candidates:
        raise ConfigError(
            f"the traced split {initial.label} does not fit in memory under the assumed "
            f"{memory_gb:g} GB GPUs and {size:g}B model: pass --config with the real cluster"
        )
    assumptions.append(
        f"no --config: candidates are the memory-feasible splits of {total} GPUs "
        f"({', '.join(candidates)}), rollout tensor-parallel size 1"
        + (f"; left out for memory: {', '.join(dropped)}" if dropped else "")
    )
    mode = _simulated_mode(meta.pipeline_mode) if meta and meta.pipeline_mode else None
    if mode is None:
        mode = PipelineMode.ONE_STEP_OFF
        assumptions.append("pipeline mode not given: assumed one_step_off")
    source_path = meta.source_path if meta else None
    scenario = ScenarioConfig.model_validate(
        {
            "name": (Path(source_path).stem if source_path else "") or "trace",
            "cluster": {
                "gpus_per_node": total,
                "intra_node_bandwidth_gbps": DEFAULT_SYNC_BANDWIDTH_GBPS,
                "gpu_memory_gb": memory_gb,
                "candidate_allocations": candidates,
                "initial_allocation": initial.label,
            },
            "model": model.model_dump(),
            # Never generated from: analyses run on the trace's own workload.
            "workload": "low_variance",
            "pipeline": {"mode": mode.value},
        }
    )
    return AnalysisContext(scenario, from_config=False, assumptions=assumptions)
