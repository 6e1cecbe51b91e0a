"""The work one sweep task does, in whichever process (local or Ray) it lands on.

Two kinds of task, both plain data in and plain data out so they travel to any worker:
- a run: one policy on one resolved config, workload and seed -> total time, resizes, thrash;
- a baseline: every static split and the offline optimum for one config (policies aside),
  workload and seed -> computed once and shared by every run with the same baseline key.

Workloads are generated (or read from a trace) once per worker process and kept in a small
cache: tasks arrive grouped by workload and seed, so a worker rarely builds one twice.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from dynaresize.traces.workload import Workload

from .config import ScenarioConfig


@dataclass(frozen=True)
class RunTask:
    key: str
    config_json: str
    """The resolved scenario, its `policies` holding exactly the policy to run."""
    trace_path: str | None
    seed: int


@dataclass(frozen=True)
class BaselineTask:
    key: str
    config_json: str
    """The resolved scenario; its policies are ignored."""
    trace_path: str | None
    seed: int


@functools.lru_cache(maxsize=4)
def _config(config_json: str) -> ScenarioConfig:
    return ScenarioConfig.model_validate_json(config_json)


@functools.lru_cache(maxsize=4)
def _trace_workload(trace_path: str) -> Workload:
    from dynaresize.traces.io import read_trace

    return read_trace(trace_path).to_workload()


@functools.lru_cache(maxsize=4)
def _synthetic_workload(workload_json: str, num_steps: int, seed: int) -> Workload:
    from dynaresize.traces.synthetic import WorkloadConfig, generate_workload

    return generate_workload(WorkloadConfig.model_validate_json(workload_json), num_steps, seed)


def workload_for(config: ScenarioConfig, trace_path: str | None, seed: int) -> Workload:
    """The recorded workload of a trace, or the config's synthetic workload for this seed."""
    if trace_path is not None:
        return _trace_workload(trace_path)
    return _synthetic_workload(config.workload.model_dump_json(), config.simulation.num_steps, seed)


def _summary_dict(summary: Any) -> dict[str, Any]:
    if hasattr(summary, "model_dump"):
        return summary.model_dump(mode="json")
    if isinstance(summary, dict):
        return dict(summary)
    return dict(vars(summary))


def evaluate_run(task: RunTask) -> dict[str, Any]:
    """Simulate one run; return its key and the measures the sweep table keeps."""
    from .simulate import simulate

    config = _config(task.config_json)
    workload = workload_for(config, task.trace_path, task.seed)
    result = simulate(
        config, config.policies[0], workload=workload, costs=config.costs, seed=task.seed
    )
    summary = _summary_dict(result.summary)
    steps, resizes = result.steps, result.resizes
    return {
        "key": task.key,
        "total_time_s": float(steps["end_s"].max()),
        "num_steps": len(steps),
        "num_resizes": int(resizes["resize_id"].nunique()) if len(resizes) else 0,
        "thrash_count": int(summary["thrash_count"]),
        "resize_time_s": float(summary.get("resize_time_s", 0.0)),
        "gpu_idle_fraction": float(summary.get("gpu_idle_fraction", float("nan"))),
        "final_allocation": f"{int(steps['train_gpus'].iloc[-1])}:"
        f"{int(steps['rollout_gpus'].iloc[-1])}",
    }


def evaluate_baseline(task: BaselineTask) -> dict[str, Any]:
    """Total time of every static split, the best of them, and the offline-optimal bound."""
    from .baselines import static_total_times_s
    from .optimal import offline_optimum_total_s

    config = _config(task.config_json)
    workload = workload_for(config, task.trace_path, task.seed)
    static_s = static_total_times_s(config, workload=workload, costs=config.costs, seed=task.seed)
    best = min(static_s, key=lambda label: (static_s[label], label))
    optimum_s = offline_optimum_total_s(
        config, workload=workload, costs=config.costs, seed=task.seed
    )
    return {
        "key": task.key,
        "best_static_allocation": best,
        "best_static_time_s": float(static_s[best]),
        "static_times_json": json.dumps({k: float(v) for k, v in sorted(static_s.items())}),
        "offline_optimal_time_s": float(optimum_s),
    }
