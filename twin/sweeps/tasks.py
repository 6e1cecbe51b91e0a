"""The work one sweep task does, in whichever process (local or Ray) it lands on.

A task is a group of runs that share one context (the same workload, seed, cluster and costs:
everything but the policy), plain data in and plain data out so that it travels to any worker:
- its runs: one policy each on the group's scenario -> total time, resizes, thrash, ...;
- the group's baseline, where it is still to do: every static split and the offline optimum
  -> computed once per context and shared by every run of it.

The expensive, policy-independent part (the workload and the stage time of every step on every
split: the twin's `SimContext`) is built once per worker process and context key and kept in a
small cache, so a context split over several groups is still built at most once per process.
Inside a group, the runs of each policy kind that has a vectorised form go through the lockstep
pipeline together (`lockstep`, `vector_policies`); the rest are simulated one by one.
"""

from __future__ import annotations

import functools
import json
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from dynaresize.policies.base import PolicyConfigBase
from dynaresize.policies.registry import parse_policy_config
from dynaresize.traces.workload import Workload

from ..config import ScenarioConfig
from ..optimal import optimum_of_context
from ..simulation import SimContext, build_context, simulate
from .lockstep import BatchFigures, batch_size, lockstep_supported, run_lockstep
from .vector_policies import CandidateMoves, vector_decider


@dataclass(frozen=True)
class RunTask:
    key: str
    policy_json: str
    """The policy to run, alone; the rest of the scenario is its context's."""


@dataclass(frozen=True)
class BaselineTask:
    key: str
    """Also the context key of the runs that use this baseline."""
    config_json: str
    """The resolved scenario; its policies are ignored."""
    trace_path: str | None
    seed: int
    trace_digest: str | None = None
    """Content hash of the trace: a trace edited in place is read again."""


@dataclass(frozen=True)
class GroupTask:
    """Runs that share one context, and the context's baseline where it is still to do."""

    context: BaselineTask
    runs: tuple[RunTask, ...]
    with_baseline: bool


@functools.lru_cache(maxsize=4)
def _trace_workload(trace_path: str, trace_digest: str | None) -> Workload:
    """The trace's workload, read once per process and content (the digest is the cache key's
    guard against a file edited between two sweeps of one session)."""
    from ..trace_source import open_trace, trace_workload

    workload, _notes = trace_workload(open_trace(trace_path))
    return workload


def trace_num_steps(trace_path: str, trace_digest: str | None) -> int:
    return _trace_workload(trace_path, trace_digest).num_steps


@dataclass
class _Shared:
    """What the runs of one context share in a worker."""

    config: ScenarioConfig
    context: SimContext
    moves: CandidateMoves


_CONTEXTS: OrderedDict[str, _Shared] = OrderedDict()
CONTEXTS_KEPT = 4
"""Contexts a worker keeps: groups of one context come together, so a handful is plenty."""


def _shared(task: BaselineTask) -> _Shared:
    """The scenario, its stage times on every split and its move tables, built once per
    worker and context key.

    The key is a hash of everything the context depends on (the config but its policies, the
    workload and the seed), so runs of different policies share one.
    """
    if task.key in _CONTEXTS:
        _CONTEXTS.move_to_end(task.key)
        return _CONTEXTS[task.key]
    config = ScenarioConfig.model_validate_json(task.config_json)
    workload = None
    if task.trace_path is not None:
        # the trace's first simulation.num_steps steps (planning checked that it holds them)
        workload = _trace_workload(task.trace_path, task.trace_digest)
        workload = workload.slice_steps(0, min(config.simulation.num_steps, workload.num_steps))
    ctx = build_context(config, workload=workload, costs=config.costs, seed=task.seed)
    moves = CandidateMoves(ctx.step_costs.candidates, ctx.plans, ctx.predicted_step_s)
    shared = _CONTEXTS[task.key] = _Shared(config, ctx, moves)
    while len(_CONTEXTS) > CONTEXTS_KEPT:
        _CONTEXTS.popitem(last=False)
    return shared


def evaluate_baseline(task: BaselineTask) -> dict[str, Any]:
    """Total time of every static split, the best of them, and the offline-optimal bound."""
    shared = _shared(task)
    config, ctx = shared.config, shared.context
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


def evaluate_group(task: GroupTask) -> dict[str, Any]:
    """Every run of the group (and its baseline where asked): `{"baseline": row or None,
    "runs": [row, ...]}`, the runs in the group's order."""
    shared = _shared(task.context)
    baseline = evaluate_baseline(task.context) if task.with_baseline else None
    policies = [parse_policy_config(json.loads(run.policy_json)) for run in task.runs]
    rows: list[dict[str, Any] | None] = [None] * len(task.runs)
    by_kind: dict[str, list[int]] = {}
    for i, policy in enumerate(policies):
        by_kind.setdefault(str(policy.kind), []).append(i)
    lockstep = lockstep_supported(shared.config)
    size = batch_size(shared.context.step_costs.num_steps)
    for same_kind in by_kind.values():
        for first in range(0, len(same_kind), size):
            indices = same_kind[first : first + size]
            batch = [policies[i] for i in indices]
            decider = vector_decider(batch, shared.moves) if lockstep else None
            if decider is None:
                for i in indices:
                    rows[i] = _simulated_row(task.runs[i].key, policies[i], shared)
                continue
            figures = run_lockstep(shared.context, shared.moves, decider)
            for j, i in enumerate(indices):
                rows[i] = _batched_row(task.runs[i].key, figures, j, shared)
    return {"baseline": baseline, "runs": rows}


RUN_MEASURES: dict[str, tuple[str, type]] = {
    "total_time_s": ("total_s", float),
    "num_steps": ("num_steps", int),
    "num_resizes": ("num_resizes", int),
    "thrash_count": ("thrash_count", int),
    "resize_time_s": ("resize_time_s", float),
    "gpu_idle_fraction": ("gpu_idle_fraction", float),
    "steps_per_hour": ("steps_per_hour", float),
    "final_allocation": ("final_allocation", str),
}
"""Column of the sweep table -> the field of a run's `SimSummary` it holds, and its type."""


def _simulated_row(key: str, policy: PolicyConfigBase, shared: _Shared) -> dict[str, Any]:
    """One run through `simulate()`: the measures the sweep table keeps."""
    summary = simulate(shared.config, policy, context=shared.context).summary
    return {
        "key": key,
        **{column: kind(getattr(summary, name)) for column, (name, kind) in RUN_MEASURES.items()},
        # the config's named static split (e.g. the paper's 6:2), when it names one
        "named_baseline_allocation": summary.baseline_allocation or "",
        "speedup_vs_named_baseline": float(summary.speedup_vs_baseline or float("nan")),
    }


def _batched_row(key: str, figures: BatchFigures, run: int, shared: _Shared) -> dict[str, Any]:
    """One run of a lockstep batch: the same measures, by `summarize_run`'s formulas."""
    num_steps = shared.context.step_costs.num_steps
    total_s = float(figures.total_s[run])
    named = shared.config.simulation.baseline_allocation
    label = None if named is None else named.label
    named_s = shared.context.baselines.totals_s.get(label) if label else None
    final = shared.moves.candidates[int(figures.final_index[run])]
    return {
        "key": key,
        "total_time_s": total_s,
        "num_steps": num_steps,
        "num_resizes": int(figures.num_resizes[run]),
        "thrash_count": int(figures.thrash_count[run]),
        "resize_time_s": float(figures.stall_s[run]),
        "gpu_idle_fraction": float(figures.gpu_idle_fraction[run]),
        "steps_per_hour": 3600.0 * num_steps / total_s if total_s > 0 else 0.0,
        "final_allocation": final.label if num_steps else "",
        "named_baseline_allocation": label or "",
        "speedup_vs_named_baseline": (named_s / total_s if named_s and total_s > 0 else math.nan),
    }
