"""The work one sweep task does, in whichever process (local or Ray) it lands on.

Two kinds of task, both plain data in and plain data out so they travel to any worker:
- a run: one policy on one resolved config, workload and seed -> total time, resizes, thrash;
- a baseline: every static split and the offline optimum for one config (policies aside),
  workload and seed -> computed once and shared by every run with the same baseline key.

The expensive, policy-independent part of a run (the workload and the stage time of every step
on every split: the twin's `SimContext`) is built once per worker process and context key and
kept in a small cache; tasks arrive grouped by workload and seed, so a worker rarely builds one
twice, and the baseline of a workload and seed is read off the very same context.
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from dynaresize.traces.workload import Workload

from ..config import ScenarioConfig
from ..optimal import optimum_of_context
from ..simulation import SimContext, build_context, simulate


@dataclass(frozen=True)
class RunTask:
    key: str
    context_key: str
    """Runs that share it share a workload, seed and every policy-independent setting."""
    config_json: str
    """The resolved scenario, its `policies` holding exactly the policy to run."""
    trace_path: str | None
    seed: int
    trace_digest: str | None = None
    """Content hash of the trace: a trace edited in place is read again."""


@dataclass(frozen=True)
class BaselineTask:
    key: str
    """Also the context key of the runs that use this baseline."""
    config_json: str
    """The resolved scenario; its policies are ignored."""
    trace_path: str | None
    seed: int
    trace_digest: str | None = None


@functools.lru_cache(maxsize=4)
def _trace_workload(trace_path: str, trace_digest: str | None) -> Workload:
    """The trace's workload, read once per process and content (the digest is the cache key's
    guard against a file edited between two sweeps of one session)."""
    from ..trace_source import open_trace, trace_workload

    workload, _notes = trace_workload(open_trace(trace_path))
    return workload


def trace_num_steps(trace_path: str, trace_digest: str | None) -> int:
    return _trace_workload(trace_path, trace_digest).num_steps


_CONTEXTS: OrderedDict[str, SimContext] = OrderedDict()
CONTEXTS_KEPT = 4
"""Contexts a worker keeps: tasks come grouped by context, so a handful is plenty."""


def _context(context_key: str, config: ScenarioConfig, task: RunTask | BaselineTask):
    """Stage times of every step on every split, built once per worker and context key.

    The key is a hash of everything the context depends on (the config but its policies, the
    workload and the seed), so runs of different policies share one.
    """
    if context_key in _CONTEXTS:
        _CONTEXTS.move_to_end(context_key)
        return _CONTEXTS[context_key]
    workload = None
    if task.trace_path is not None:
        # the trace's first simulation.num_steps steps (planning checked that it holds them)
        workload = _trace_workload(task.trace_path, task.trace_digest)
        workload = workload.slice_steps(0, min(config.simulation.num_steps, workload.num_steps))
    ctx = build_context(config, workload=workload, costs=config.costs, seed=task.seed)
    _CONTEXTS[context_key] = ctx
    while len(_CONTEXTS) > CONTEXTS_KEPT:
        _CONTEXTS.popitem(last=False)
    return ctx


def evaluate_run(task: RunTask) -> dict[str, Any]:
    """Simulate one run; return its key and the measures the sweep table keeps."""
    config = ScenarioConfig.model_validate_json(task.config_json)
    ctx = _context(task.context_key, config, task)
    result = simulate(config, config.policies[0], context=ctx)
    summary = result.summary
    return {
        "key": task.key,
        "total_time_s": float(summary.total_s),
        "num_steps": int(summary.num_steps),
        "num_resizes": int(summary.num_resizes),
        "thrash_count": int(summary.thrash_count),
        "resize_time_s": float(summary.resize_time_s),
        "gpu_idle_fraction": float(summary.gpu_idle_fraction),
        "steps_per_hour": float(summary.steps_per_hour),
        "final_allocation": str(summary.final_allocation),
        # the config's named static split (e.g. the paper's 6:2), when it names one
        "named_baseline_allocation": summary.baseline_allocation or "",
        "speedup_vs_named_baseline": float(summary.speedup_vs_baseline or float("nan")),
    }


def evaluate_baseline(task: BaselineTask) -> dict[str, Any]:
    """Total time of every static split, the best of them, and the offline-optimal bound."""
    config = ScenarioConfig.model_validate_json(task.config_json)
    ctx = _context(task.key, config, task)
    baselines = ctx.baselines
    optimum = optimum_of_context(ctx)
    return {
        "key": task.key,
        "best_static_allocation": baselines.best_allocation,
        "best_static_time_s": float(baselines.best_total_s),
        "static_times_json": json.dumps(
            {k: float(v) for k, v in sorted(baselines.totals_s.items())}
        ),
        "initial_allocation": config.cluster.initial_allocation.label,
        "initial_static_time_s": float(baselines.totals_s[config.cluster.initial_allocation.label]),
        "offline_optimal_time_s": float(optimum.total_s),
        "offline_optimal_resizes": int(optimum.num_resizes),
    }
