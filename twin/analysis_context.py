"""What the trace-driven jobs (calibrate, validate, replay, break-even) take from an optional
config.

A trace says what happened; to ask "what if" these jobs also need the cluster (candidate
splits, links, tensor-parallel size), the model (bytes per parameter), the pipeline mode and base
cost parameters: a twin scenario. With a config it is that scenario (the command line resolves
`--config NAME` and hands it over; a path is read as a scenario YAML file); without, it is built
from the trace's metadata, the facts the user gave as flags (`run_facts.RunFacts`) and stated
defaults; each default is an `AssumedFact` naming the flag that would supply it, so the output
can list what was assumed in one block (and `--strict` can refuse it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dynaresize.config_io import ConfigError, format_validation_error

from ..policies.types import Allocation
from ..traces.importers import sidecar_options
from ..traces.importers.common import GPU_COUNT_ASSUMED
from ..traces.io import Trace
from ..traces.phases import PipelineMode
from .config import ClusterConfig, ScenarioConfig, load_config
from .costs import CostModels, load_costs
from .costs.memory import ModelConfig, check_candidate
from .costs.provenance import outside_range_warning
from .run_facts import AssumedFact, Assumptions, RunFacts, colocated_start_fact

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
    assumed: tuple[AssumedFact, ...] = ()
    """Facts the analysis depends on that nothing gave: printed first, refused by --strict."""
    notes: list[str] = field(default_factory=list)
    """How the rest of the scenario was derived (candidate splits, pipeline mode)."""
    what_if_start_assumed: bool = False
    """A colocated run's disaggregated start split was not given: the analysis picks it."""
    warnings: tuple[str, ...] = ()
    """Costs applied outside the range they were fitted on (printed beside the assumptions)."""

    @property
    def assumptions(self) -> list[str]:
        """Every assumed fact and derivation note as text lines."""
        return [f.line() for f in self.assumed] + list(self.notes)

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

    def with_initial(self, initial: Allocation) -> AnalysisContext:
        cluster = self.scenario.cluster.model_copy(update={"initial_allocation": initial})
        return replace(self, scenario=self.scenario.model_copy(update={"cluster": cluster}))

    def scenario_for_steps(self, num_steps: int) -> ScenarioConfig:
        simulation = self.scenario.simulation.model_copy(update={"num_steps": max(1, num_steps)})
        return self.scenario.model_copy(update={"simulation": simulation})


def context_from_config(
    config: ScenarioConfig | str | os.PathLike[str] | None,
    traces: list[Trace],
    *,
    costs_path: str | os.PathLike[str] | None = None,
    facts: RunFacts | None = None,
) -> AnalysisContext:
    """The context of `config` (a scenario, or the path of a scenario YAML file) when given,
    else one built from the traces' metadata and defaults; `facts` (the user's flags) win over
    both. `costs_path` overrides its costs."""
    facts = facts or RunFacts()
    found = Assumptions()
    if config is not None:
        scenario = config if isinstance(config, ScenarioConfig) else load_config(config)
        scenario = _with_facts(scenario, facts)
        context = AnalysisContext(scenario, from_config=True)
    else:
        context = _context_from_traces(traces, facts, found)
    _assume_imported_split(traces, facts, context.from_config, found)
    colocated = bool(traces) and traces[0].meta.pipeline_mode is PipelineMode.COLOCATED
    start_assumed = colocated and not facts.has_split and not context.from_config
    if start_assumed:
        found.facts.append(colocated_start_fact())
    context = replace(
        context,
        assumed=tuple(found.facts),
        notes=found.notes,
        what_if_start_assumed=start_assumed,
    )
    if costs_path is not None:
        context = context.with_costs(load_costs(costs_path, base=context.costs))
    warning = outside_range_warning(context.costs.fitted_on, context.model.num_params_b)
    return replace(context, warnings=(warning,) if warning else ())


def _with_facts(scenario: ScenarioConfig, facts: RunFacts) -> ScenarioConfig:
    """The config's scenario with the flags' facts put over it, validated again (a split or a
    model that does not fit the config's GPUs is an error naming the flag's field)."""
    if facts == RunFacts():
        return scenario
    data: dict[str, Any] = scenario.model_dump(mode="json")
    cluster = data["cluster"]
    if facts.model_params_b is not None:
        data["model"]["num_params_b"] = facts.model_params_b
    if facts.gpu_memory_gb is not None:
        cluster["gpu_memory_gb"] = facts.gpu_memory_gb
    if facts.link_gbps is not None:
        link = (
            "intra_node_bandwidth_gbps"
            if cluster["num_nodes"] == 1
            else "inter_node_bandwidth_gbps"
        )
        cluster[link] = facts.link_gbps
    if facts.has_split:
        cluster["initial_allocation"] = f"{facts.train_gpus}:{facts.rollout_gpus}"
    try:
        return type(scenario).model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, "the config with the given flags")) from None


def _split_given_for(trace: Trace, facts: RunFacts, from_config: bool) -> bool:
    """Whether something other than the importer's default gave a foreign log's split."""
    if trace.meta.importer is None or facts.has_split or from_config:
        return True
    path = trace.meta.source_path
    sidecar = sidecar_options(Path(path)) if path else None
    return sidecar is not None and bool(
        (sidecar.train_gpus and sidecar.rollout_gpus)
        or (sidecar.num_gpus and (sidecar.train_gpus or sidecar.rollout_gpus))
    )


def _assume_imported_split(
    traces: list[Trace], facts: RunFacts, from_config: bool, found: Assumptions
) -> None:
    if not traces:
        return
    trace = traces[0]
    meta = trace.meta
    count_assumed = any(n.startswith(GPU_COUNT_ASSUMED) for n in meta.notes)
    if meta.pipeline_mode is PipelineMode.COLOCATED:
        if count_assumed and not facts.has_split:
            found.assume("GPU count", f"{meta.num_gpus}", "--train-gpus and --rollout-gpus")
        return
    if not _split_given_for(trace, facts, from_config):
        split = f"{meta.start_train_gpus}:{meta.start_rollout_gpus}"
        found.assume("train:rollout split", split, "--train-gpus and --rollout-gpus")


def _start_allocation(traces: list[Trace], facts: RunFacts, found: Assumptions) -> Allocation:
    meta = traces[0].meta if traces else None
    if facts.has_split:
        assert facts.train_gpus is not None and facts.rollout_gpus is not None
        return Allocation(train_gpus=facts.train_gpus, rollout_gpus=facts.rollout_gpus)
    train: int | None
    rollout: int | None
    if meta is not None and meta.pipeline_mode is PipelineMode.COLOCATED:
        first = traces[0].steps.iloc[0] if len(traces[0].steps) else None
        total = meta.num_gpus or (int(first["train_gpus"]) if first is not None else 8)
        # A placeholder until the analysis picks the what-if start (it is said then).
        return Allocation(train_gpus=total - total // 2, rollout_gpus=total // 2)
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
    found.assume("train:rollout split", f"{train}:{rollout}", "--train-gpus and --rollout-gpus")
    return Allocation(train_gpus=train, rollout_gpus=rollout)


def _context_from_traces(
    traces: list[Trace], facts: RunFacts, found: Assumptions
) -> AnalysisContext:
    meta = traces[0].meta if traces else None
    initial = _start_allocation(traces, facts, found)
    total = initial.total_gpus
    size = facts.model_params_b or next(
        (t.meta.model_params_b for t in traces if t.meta.model_params_b), None
    )
    if size is None:
        size = DEFAULT_MODEL_PARAMS_B
        found.assume("model size", f"{size:g}B parameters", "--model-params-b")
    model = ModelConfig(num_params_b=size)
    gpu_type = (meta.gpu_type or "").upper() if meta else ""
    memory_gb = facts.gpu_memory_gb or GPU_MEMORY_GB.get(gpu_type)
    if memory_gb is None:
        memory_gb = DEFAULT_GPU_MEMORY_GB
        found.assume("GPU memory", f"{memory_gb:g} GB per GPU", "--gpu-memory-gb")
    link_gbps = facts.link_gbps
    if link_gbps is None:
        link_gbps = DEFAULT_SYNC_BANDWIDTH_GBPS
        found.assume("weight-sync link", f"{link_gbps:g} GB/s (one node)", "--link-gbps")
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
            f"the traced split {initial.label} does not fit in memory with {memory_gb:g} GB "
            f"GPUs and a {size:g}B model: give --gpu-memory-gb and --model-params-b, or "
            "--config with the real cluster"
        )
    found.notes.append(
        f"no --config: candidates are the memory-feasible splits of {total} GPUs "
        f"({', '.join(candidates)}), rollout tensor-parallel size 1"
        + (f"; left out for memory: {', '.join(dropped)}" if dropped else "")
    )
    mode = _simulated_mode(meta.pipeline_mode) if meta and meta.pipeline_mode else None
    if mode is None:
        mode = PipelineMode.ONE_STEP_OFF
        found.assume("pipeline mode", "one_step_off", "--config")
    source_path = meta.source_path if meta else None
    scenario = ScenarioConfig.model_validate(
        {
            "name": (Path(source_path).stem if source_path else "") or "trace",
            "cluster": {
                "gpus_per_node": total,
                "intra_node_bandwidth_gbps": link_gbps,
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
    return AnalysisContext(scenario, from_config=False)
