"""A sweep's plan: every run of the space, each a task keyed by a hash of what determines it.

The space (grid or random points, `space.py`) times workload sources (presets or traces) times
seeds times every configured policy that has the swept knobs gives the runs. A configured policy
that lacks a swept `policy.FIELD` is not left out: it runs at its own settings, once per value
of the config-field parameters, as a reference row, and the plan's notes say so. Each run's key
hashes the sweep format, the code (`code_fingerprint`), the trace's content, the seed, the
resolved config and the policy; its static baselines and offline optimum are keyed without the
policy, and that key is also the run's context: every run of the same workload, seed and
policy-independent settings shares them, and the plan hands such runs out in groups
(`SweepPlan.groups`). Every point is validated while planning, before anything runs.

Every value a row reports is one its run used. A trace's workload is the one it recorded, so on a
trace a swept `simulation.num_steps` replays the trace's first N steps (more than it holds is
refused), and what a trace run would ignore is refused before anything runs: a workload field,
and more than one seed. The workload seed of every run is the sweep's own (`seeds`), so sweeping
`simulation.seed` is refused too.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dynaresize.config_io import ConfigError, format_validation_error

from ..config import ScenarioConfig
from .space import (
    Scalar,
    SweepParam,
    apply_overrides,
    grid_points,
    override_policy,
    parse_param,
    policies_with_fields,
    policies_without_fields,
    random_points,
    split_point,
)
from .tasks import BaselineTask, GroupTask, RunTask, trace_num_steps

SWEEP_FORMAT_VERSION = 1
"""Part of every key: bump it when what a run computes changes, and old caches stop matching."""
GROUPS_PER_WORKER = 2
"""Groups per worker over the whole sweep: enough to balance, few enough that each worker
builds few contexts and advances many runs of one together."""
MIN_GROUP_RUNS = 32
"""A context's runs are not split into groups smaller than this."""

SEED_PATH = "simulation.seed"
STEPS_PATH = "simulation.num_steps"
WORKLOAD_SECTION = "workload"


@dataclass(frozen=True)
class WorkloadSource:
    """Where a run's workload comes from: a preset, a trace file, or the config's own."""

    label: str
    preset: str | None = None
    trace_path: str | None = None


@dataclass(frozen=True)
class PlannedRun:
    """One row of the table before it has run: its coordinates and its task keys."""

    point: dict[str, Scalar]
    policy_index: int
    policy_kind: str
    source: WorkloadSource
    seed: int
    run: RunTask
    baseline: BaselineTask


@dataclass
class SweepPlan:
    """Every run of a sweep and the distinct baselines they need, in a fixed order."""

    param_paths: list[str]
    runs: list[PlannedRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the sweep did other than the grid says: a policy it could not apply a parameter to."""

    def baselines(self) -> list[BaselineTask]:
        unique: dict[str, BaselineTask] = {}
        for run in self.runs:
            unique.setdefault(run.baseline.key, run.baseline)
        return list(unique.values())

    def groups(
        self, *, runs_done: Container[str], baselines_done: Container[str], num_workers: int
    ) -> list[GroupTask]:
        """The work still to do, as tasks of runs that share a context (and its baseline).

        A context's runs are split into about `GROUPS_PER_WORKER * num_workers` groups over all
        contexts, none smaller than `MIN_GROUP_RUNS` where it has more runs, so that every worker
        has work; a worker keeps its last few contexts, and the groups of one context come one
        after the other, so it rarely builds one twice. The first group of a context carries
        its baseline when that is still to do. A run planned twice (a random sample
        drawing one point again) is done once.
        """
        pending: dict[str, dict[str, RunTask]] = {}
        contexts: dict[str, BaselineTask] = {}
        for planned in self.runs:
            key = planned.baseline.key
            contexts.setdefault(key, planned.baseline)
            todo = pending.setdefault(key, {})
            if planned.run.key not in runs_done:
                todo.setdefault(planned.run.key, planned.run)
        per_context = max(1, math.ceil(GROUPS_PER_WORKER * num_workers / max(1, len(contexts))))
        tasks: list[GroupTask] = []
        for key, context in contexts.items():
            runs = list(pending[key].values())
            with_baseline = key not in baselines_done
            if not runs and not with_baseline:
                continue
            num_groups = max(1, min(per_context, len(runs) // MIN_GROUP_RUNS))
            size = max(1, math.ceil(len(runs) / num_groups))
            for first in range(0, max(1, len(runs)), size):
                tasks.append(GroupTask(context, tuple(runs[first : first + size]), with_baseline))
                with_baseline = False
        return tasks


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of the source of every package a run's result depends on, so that cached runs
    made by other code (an edited cost model, a fixed policy) are run again, never reused."""
    import dynaresize.policies
    import dynaresize.traces
    import dynaresize.twin

    sha = hashlib.sha256()
    for package in (dynaresize.policies, dynaresize.traces, dynaresize.twin):
        root = Path(package.__path__[0])
        for source in sorted(root.rglob("*.py")):
            sha.update(str(source.relative_to(root)).encode())
            sha.update(source.read_bytes())
    return sha.hexdigest()[:20]


def _digest(*parts: str) -> str:
    """Key of a task: a hash of its identity (format, code, trace, seed) and resolved config."""
    sha = hashlib.sha256()
    for part in parts:
        sha.update(part.encode())
        sha.update(b"\0")
    return sha.hexdigest()[:20]


def _file_digest(path: Path) -> str:
    """Content hash of a trace (a file or a Parquet directory), so an edited trace reruns."""
    sha = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        sha.update(str(f.relative_to(path) if path.is_dir() else f.name).encode())
        sha.update(f.read_bytes())
    return sha.hexdigest()[:20]


def _sources(
    config: ScenarioConfig,
    workloads: Sequence[str] | None,
    traces: Sequence[str | os.PathLike] | None,
) -> list[WorkloadSource]:
    sources = [WorkloadSource(label=str(w), preset=str(w)) for w in workloads or ()]
    for t in traces or ():
        path = Path(t)
        if not path.exists():
            raise FileNotFoundError(2, "trace not found", str(path))
        sources.append(WorkloadSource(label=path.name, trace_path=str(path.resolve())))
    return sources or [WorkloadSource(label=config.workload.name)]


def _seeds(seeds: int | Sequence[int]) -> list[int]:
    if isinstance(seeds, int):
        if seeds < 1:
            raise ConfigError(f"seeds must be at least 1, got {seeds}")
        return list(range(seeds))
    values = [int(s) for s in seeds]
    if not values or len(set(values)) != len(values) or min(values) < 0:
        raise ConfigError(f"seeds {values} must be distinct non-negative integers, at least one")
    return values


def _base_config(
    config: ScenarioConfig, source: WorkloadSource, seed: int, trace_steps: int | None
) -> ScenarioConfig:
    """The config for one workload and seed: preset swapped in, seed and length set."""
    data = config.model_dump(mode="json")
    if source.preset is not None:
        data["workload"] = source.preset
    data["simulation"]["seed"] = seed
    if trace_steps is not None:
        data["simulation"]["num_steps"] = trace_steps
    try:
        return type(config).model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, f"workload {source.label}")) from None


def _trace_steps(source: WorkloadSource) -> tuple[int | None, str | None]:
    if source.trace_path is None:
        return None, None
    digest = _file_digest(Path(source.trace_path))
    return trace_num_steps(source.trace_path, digest), digest


def plan_sweep(
    config: ScenarioConfig,
    *,
    params: Sequence[str | SweepParam] = (),
    random: int | None = None,
    sample_seed: int = 0,
    seeds: int | Sequence[int] = 1,
    workloads: Sequence[str] | None = None,
    traces: Sequence[str | os.PathLike] | None = None,
) -> SweepPlan:
    """Expand the space into runs, validating every point before anything runs."""
    parsed = [p if isinstance(p, SweepParam) else parse_param(p) for p in params]
    points = (
        random_points(parsed, num_samples=random, sample_seed=sample_seed)
        if random is not None
        else grid_points(parsed)
    )
    paths = [p.path for p in parsed]
    policy_indices = policies_with_fields(config, paths)
    unswept = policies_without_fields(config, paths)
    sources = _sources(config, workloads, traces)
    seed_values = _seeds(seeds)
    _refuse_ignored_settings(paths, sources, seed_values)
    plan = SweepPlan(param_paths=paths, notes=[u.note() for u in unswept])
    for source in sources:
        trace_steps, trace_digest = _trace_steps(source)
        for seed in seed_values:
            base = _base_config(config, source, seed, trace_steps)
            identity = json.dumps(
                {
                    "version": SWEEP_FORMAT_VERSION,
                    "code": code_fingerprint(),
                    "trace": trace_digest,
                    "seed": seed,
                },
                sort_keys=True,
            )
            resolved_by_config_part: dict[str, tuple[ScenarioConfig, BaselineTask]] = {}
            for point in points:
                config_part, policy_part = split_point(point)
                marker = repr(sorted(config_part.items()))
                if marker not in resolved_by_config_part:
                    resolved = apply_overrides(base, config_part)
                    _check_trace_long_enough(resolved, source, trace_steps)
                    baseline_json = resolved.model_copy(update={"policies": []}).model_dump_json()
                    baseline = BaselineTask(
                        _digest(identity, "baseline", baseline_json),
                        baseline_json,
                        source.trace_path,
                        seed,
                        trace_digest,
                    )
                    resolved_by_config_part[marker] = (resolved, baseline)
                    # Policies that lack a swept knob: once per config part, at their own settings.
                    for u in unswept:
                        policy = resolved.policies[u.index]
                        plan.runs.append(
                            _planned(identity, policy, u.index, config_part, source, baseline)
                        )
                resolved, baseline = resolved_by_config_part[marker]
                for policy_index in policy_indices:
                    policy = override_policy(
                        resolved.policies[policy_index], policy_part, point=point
                    )
                    plan.runs.append(
                        _planned(identity, policy, policy_index, point, source, baseline)
                    )
    return plan


def _refuse_ignored_settings(
    paths: list[str], sources: list[WorkloadSource], seeds: list[int]
) -> None:
    """Refuse a swept setting that some run would not use, so that no row reports it."""
    if SEED_PATH in paths:
        raise ConfigError(
            f"sweep parameter {SEED_PATH!r}: the sweep sets every run's workload seed itself "
            "(--seeds N runs seeds 0 to N-1, in the seed column); sweep seeds with --seeds"
        )
    traced = [s.label for s in sources if s.trace_path is not None]
    if not traced:
        return
    for path in paths:
        if path == WORKLOAD_SECTION or path.startswith(WORKLOAD_SECTION + "."):
            raise ConfigError(
                f"sweep parameter {path!r} does not reach the trace {traced[0]}: a trace's "
                "workload is the one it recorded; sweep workload settings over --workload "
                "presets, in a sweep without --trace"
            )
    if len(seeds) > 1:
        raise ConfigError(
            f"--seeds {len(seeds)} with the trace {traced[0]}: a trace's workload is recorded, "
            "not drawn from a seed, so every seed would repeat the same run; sweep traces with "
            "one seed (presets with several in a sweep of their own)"
        )


def _check_trace_long_enough(
    resolved: ScenarioConfig, source: WorkloadSource, trace_steps: int | None
) -> None:
    """A run on a trace replays its first `simulation.num_steps` steps: no more than it holds."""
    steps = resolved.simulation.num_steps
    if trace_steps is not None and steps > trace_steps:
        raise ConfigError(
            f"sweep parameter {STEPS_PATH}={steps}: the trace {source.label} has {trace_steps} "
            f"steps; sweep at most {trace_steps} (a run on a trace replays its first N steps)"
        )


def _planned(
    identity: str,
    policy: Any,
    policy_index: int,
    point: dict[str, Scalar],
    source: WorkloadSource,
    baseline: BaselineTask,
) -> PlannedRun:
    """One run: `policy` alone on its baseline's resolved config, keyed by what determines it."""
    policy_json = policy.model_dump_json()
    return PlannedRun(
        point=dict(point),
        policy_index=policy_index,
        policy_kind=str(getattr(policy.kind, "value", policy.kind)),
        source=source,
        seed=baseline.seed,
        run=RunTask(_digest(identity, "run", baseline.config_json, policy_json), policy_json),
        baseline=baseline,
    )
