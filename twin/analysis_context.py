"""What the trace-analysis commands (calibrate, breakeven, replay) take from an optional config.

A trace says what happened; to ask "what if" the commands also need the cluster (candidate
splits, links, tensor-parallel size), the model (bytes per parameter) and base cost parameters.
With `--config` they come from there; without it, from the trace's metadata and stated defaults,
each default named in `assumptions` so the output can say what was assumed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..policies.types import Allocation
from ..traces.io import Trace
from .costs import CostModels, load_costs
from .costs.memory import ModelConfig
from .fit import DEFAULT_MODEL_PARAMS_B, DEFAULT_SYNC_BANDWIDTH_GBPS

BUILTIN_CONFIG_DIR = Path(__file__).resolve().parent.parent / "dynaresize" / "configs"


@dataclass(frozen=True)
class AnalysisContext:
    """Everything besides the trace that fitting, replay and break-even need."""

    model: ModelConfig
    candidates: tuple[Allocation, ...]
    initial: Allocation
    rollout_tp_size: int
    sync_bandwidth_gbps: float
    costs: CostModels
    scenario: object | None = None
    """The loaded ScenarioConfig when --config was given (replay simulates with it)."""
    assumptions: list[str] = field(default_factory=list)

    @property
    def total_gpus(self) -> int:
        return self.initial.total_gpus


def resolve_config_path(config: str | Path) -> Path:
    """A built-in config name (`example`, `paper`) or a path."""
    text = str(config)
    builtin = BUILTIN_CONFIG_DIR / f"{text}.yaml"
    if not text.endswith((".yaml", ".yml")) and builtin.is_file():
        return builtin
    return Path(text)


def load_scenario(config: str | Path):
    """The scenario of a config file or built-in name (raises ConfigError naming file and field)."""
    from .config import load_config

    return load_config(resolve_config_path(config))


def context_from_config(
    config: str | Path | None, traces: list[Trace], *, costs_path: str | Path | None = None
) -> AnalysisContext:
    """The context from `--config` when given, else from the traces' metadata and defaults."""
    if config is not None:
        scenario = load_scenario(config)
        cluster = scenario.cluster
        costs = scenario.costs
        if costs_path is not None:
            costs = load_costs(costs_path, base=costs)
        return AnalysisContext(
            model=scenario.model,
            candidates=tuple(cluster.candidate_topologies),
            initial=cluster.initial_allocation,
            rollout_tp_size=cluster.rollout_tensor_parallel_size,
            sync_bandwidth_gbps=cluster.weight_sync_bandwidth_gbps(),
            costs=costs,
            scenario=scenario,
        )
    return _context_from_traces(traces, costs_path=costs_path)


def _context_from_traces(traces: list[Trace], *, costs_path: str | Path | None) -> AnalysisContext:
    assumptions = []
    first = traces[0].steps.iloc[0] if traces and len(traces[0].steps) else None
    meta = traces[0].meta if traces else None
    train = meta.start_train_gpus if meta and meta.start_train_gpus else None
    rollout = meta.start_rollout_gpus if meta and meta.start_rollout_gpus else None
    if (train is None or rollout is None) and first is not None:
        train, rollout = int(first["train_gpus"]), int(first["rollout_gpus"])
    if not train or not rollout:
        total = (meta.num_gpus if meta and meta.num_gpus else None) or 8
        train, rollout = total - total // 2, total // 2
        assumptions.append(
            f"the trace shows no disaggregated split: assumed {train}:{rollout} to start"
        )
    initial = Allocation(train_gpus=train, rollout_gpus=rollout)
    total = initial.total_gpus
    candidates = tuple(
        Allocation(train_gpus=t, rollout_gpus=total - t) for t in range(total - 1, 0, -1)
    )
    assumptions.append(
        "no --config: candidates are every split of "
        f"{total} GPUs ({', '.join(c.label for c in candidates)}), rollout tensor-parallel size 1"
    )
    size = next((t.meta.model_params_b for t in traces if t.meta.model_params_b), None)
    if size is None:
        size = DEFAULT_MODEL_PARAMS_B
        assumptions.append(f"model size not given: assumed {size:g}B parameters")
    assumptions.append(
        f"weight-sync link not given: assumed {DEFAULT_SYNC_BANDWIDTH_GBPS:g} GB/s (one node)"
    )
    costs = load_costs(costs_path) if costs_path is not None else CostModels()
    return AnalysisContext(
        model=ModelConfig(num_params_b=size),
        candidates=candidates,
        initial=initial,
        rollout_tp_size=1,
        sync_bandwidth_gbps=DEFAULT_SYNC_BANDWIDTH_GBPS,
        costs=costs,
        assumptions=assumptions,
    )
