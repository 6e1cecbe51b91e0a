"""Sweeps: many twin runs over a space of settings, as one tidy table.

    table = run_sweep(
        config,
        params=["policy.cooldown_steps=5,10,20", "policy.up_threshold=0.1,0.2"],
        seeds=3,
        workloads=["high_variance", "growing_lengths"],
        out="runs/sweep1",
    )

The space is a grid (or `random=N` samples) over dotted-path parameters (`twin.sweeps.space`),
times workloads (presets) or traces, times seeds, times every configured policy that has the
swept knobs. Each run is a task keyed by a hash of its resolved config, workload and seed; its
static baselines and offline optimum form a separate task keyed without the policy, so they are
computed once per workload and seed and shared. Tasks run in local processes on all cores
(`concurrent.futures`), or on a Ray cluster when `ray_address` is given (Ray's multiprocessing
pool); both hand back results in submission order, so the table is the same either way. Finished
runs are cached under `out/cache/`, so a repeated or extended sweep only runs what is new.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError
from tqdm import tqdm

from dynaresize.config_io import ConfigError, format_validation_error

from ..config import ScenarioConfig, load_config
from ..optimal import Regret
from .space import (
    Scalar,
    SweepParam,
    apply_overrides,
    grid_points,
    override_policy,
    parse_param,
    policies_with_fields,
    random_points,
    split_point,
)
from .store import ResultCache
from .tasks import BaselineTask, RunTask, evaluate_baseline, evaluate_run, trace_num_steps

SWEEP_FORMAT_VERSION = 1
"""Part of every key: bump it when what a run computes changes, and old caches stop matching."""
RESULTS_FILENAME = "results.parquet"
SPEC_FILENAME = "sweep.json"
TASKS_PER_WORKER_CHUNK = 8
"""Chunks per worker: large enough to amortise dispatch, small enough to balance the load."""


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

    def baselines(self) -> list[BaselineTask]:
        unique: dict[str, BaselineTask] = {}
        for run in self.runs:
            unique.setdefault(run.baseline.key, run.baseline)
        return list(unique.values())


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of the source of every package a run's result depends on, so that cached runs
    made by other code (an edited cost model, a fixed policy) are run again, never reused."""
    import dynaresize.policies
    import dynaresize.traces
    import dynaresize.twin

    sha = hashlib.sha256()
    for package in (dynaresize.policies, dynaresize.traces, dynaresize.twin):
        root = Path(package.__file__).parent
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
    plan = SweepPlan(param_paths=paths)
    for source in _sources(config, workloads, traces):
        trace_steps, trace_digest = _trace_steps(source)
        for seed in _seeds(seeds):
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
                    baseline_json = resolved.model_copy(update={"policies": []}).model_dump_json()
                    baseline = BaselineTask(
                        _digest(identity, "baseline", baseline_json),
                        baseline_json,
                        source.trace_path,
                        seed,
                        trace_digest,
                    )
                    resolved_by_config_part[marker] = (resolved, baseline)
                resolved, baseline = resolved_by_config_part[marker]
                for policy_index in policy_indices:
                    policy = override_policy(
                        resolved.policies[policy_index], policy_part, point=point
                    )
                    run_json = resolved.model_copy(update={"policies": [policy]}).model_dump_json()
                    plan.runs.append(
                        PlannedRun(
                            point=dict(point),
                            policy_index=policy_index,
                            policy_kind=str(getattr(policy.kind, "value", policy.kind)),
                            source=source,
                            seed=seed,
                            run=RunTask(
                                _digest(identity, "run", run_json),
                                baseline.key,
                                run_json,
                                source.trace_path,
                                seed,
                                trace_digest,
                            ),
                            baseline=baseline,
                        )
                    )
    return plan


def _chunksize(num_tasks: int, num_workers: int) -> int:
    return max(1, math.ceil(num_tasks / (num_workers * TASKS_PER_WORKER_CHUNK)))


def available_cores() -> int:
    """Cores this process may run on (a container's CPU set, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def _set_environment(env: dict[str, str]) -> None:
    os.environ.update(env)


@contextlib.contextmanager
def _ray_mapper(
    *, jobs: int | None, ray_address: str, worker_env: dict[str, str]
) -> Iterator[Callable[[Callable, list], Iterable]]:
    """Ray's multiprocessing pool: one actor per worker on the cluster, ordered `imap`."""
    import ray
    from ray.util.multiprocessing import Pool

    if not ray.is_initialized():
        ray.init(address=None if ray_address == "local" else ray_address, log_to_driver=False)
    remote_args = {"runtime_env": {"env_vars": worker_env}} if worker_env else None
    pool = Pool(processes=jobs, ray_remote_args=remote_args)
    num_workers = max(1, int(getattr(pool, "_processes", jobs or 1)))
    try:
        yield lambda fn, tasks: pool.imap(fn, tasks, chunksize=_chunksize(len(tasks), num_workers))
    finally:
        pool.terminate()


@contextlib.contextmanager
def _local_mapper(
    *, jobs: int, worker_env: dict[str, str]
) -> Iterator[Callable[[Callable, list], Iterable]]:
    """Processes on this machine (forked where the platform allows: they inherit the compiled
    kernels and imports of this one), ordered `map`; jobs=1 runs in this process."""
    if jobs == 1:
        saved = {k: os.environ.get(k) for k in worker_env}
        _set_environment(worker_env)
        try:
            yield map
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ProcessPoolExecutor(
        max_workers=jobs, mp_context=context, initializer=_set_environment, initargs=(worker_env,)
    ) as executor:
        yield lambda fn, tasks: executor.map(fn, tasks, chunksize=_chunksize(len(tasks), jobs))


def _execute(
    fn: Callable[[Any], dict],
    tasks: list,
    cache: ResultCache,
    *,
    mapper: Callable[[Callable, list], Iterable],
    progress: bool,
    desc: str,
) -> None:
    todo = [t for t in tasks if t.key not in cache]
    if not todo:
        return
    try:
        results = mapper(fn, todo)
        for row in tqdm(results, total=len(todo), desc=desc, disable=not progress, unit="run"):
            cache.add(row)
    finally:
        cache.flush()


def _warm_up(plan: SweepPlan, baselines: ResultCache) -> None:
    """Do the first pending baseline here, before local workers are forked from this process.

    It compiles the twin's kernels and builds a context once, and forked workers inherit both
    instead of each compiling again; the result is kept, so no work is wasted.
    """
    pending = [t for t in plan.baselines() if t.key not in baselines]
    if pending:
        baselines.add(evaluate_baseline(pending[0]))
        baselines.flush()


def _table(plan: SweepPlan, runs: ResultCache, baselines: ResultCache) -> pd.DataFrame:
    rows = []
    for planned in plan.runs:
        run = runs.get(planned.run.key)
        base = baselines.get(planned.baseline.key)
        total_s = float(run["total_time_s"])
        optimum_s = float(base["offline_optimal_time_s"])
        regret = Regret(total_s, optimum_s)
        rows.append(
            {
                **{path: planned.point.get(path) for path in plan.param_paths},
                "policy": planned.policy_kind,
                "policy_index": planned.policy_index,
                "workload": planned.source.label,
                "seed": planned.seed,
                **{k: v for k, v in run.items() if k != "key"},
                "best_static_allocation": base["best_static_allocation"],
                "best_static_time_s": float(base["best_static_time_s"]),
                "speedup": float(base["best_static_time_s"]) / total_s,
                "initial_allocation": base["initial_allocation"],
                "initial_static_time_s": float(base["initial_static_time_s"]),
                "offline_optimal_time_s": optimum_s,
                "regret_s": regret.regret_s,
                "regret_frac": regret.regret_fraction,
                "run_key": planned.run.key,
                "baseline_key": planned.baseline.key,
            }
        )
    return pd.DataFrame(rows)


def _load_config(config: ScenarioConfig | str | os.PathLike[str]) -> ScenarioConfig:
    """The scenario to sweep: as given, or read from a scenario YAML file. A config that
    carries run-only settings besides (a `dynaresize run` config's live and output sections)
    is narrowed to the scenario: a twin run has no use for them, and every task re-reads its
    scenario as a plain `ScenarioConfig`."""
    if not isinstance(config, ScenarioConfig):
        config = load_config(config)
    if type(config) is ScenarioConfig:
        return config
    fields = set(ScenarioConfig.model_fields)
    return ScenarioConfig.model_validate(config.model_dump(mode="json", include=fields))


def _with_costs(config: ScenarioConfig, costs: Any) -> ScenarioConfig:
    """Calibrated costs (a CostModels or a YAML file of them) replace the config's own."""
    if costs is None:
        return config
    from ..costs import CostModels, load_costs

    models = costs if isinstance(costs, CostModels) else load_costs(costs, base=config.costs)
    return config.model_copy(update={"costs": models})


def run_sweep(
    config: ScenarioConfig | str | os.PathLike,
    *,
    params: Sequence[str | SweepParam] = (),
    random: int | None = None,
    sample_seed: int = 0,
    seeds: int | Sequence[int] = 1,
    workloads: Sequence[str] | None = None,
    traces: Sequence[str | os.PathLike] | None = None,
    costs: Any = None,
    out: str | os.PathLike | None = None,
    jobs: int | None = None,
    ray_address: str | None = None,
    worker_env: dict[str, str] | None = None,
    progress: bool = True,
) -> pd.DataFrame:
    """Run (or resume) a sweep and return its table, one row per run.

    Columns: one per swept parameter (named by its dotted path), `policy`, `workload`, `seed`,
    the run's measures (`total_time_s`, `num_resizes`, `thrash_count`, ...), the shared baseline
    (`best_static_allocation`, `best_static_time_s`, the time of staying on the initial split
    `initial_static_time_s`, `offline_optimal_time_s`), and
    `speedup` (best static time over this run's time) and `regret_s`/`regret_frac` (time over
    the offline optimum). With `out`, the table goes to `out/results.parquet` and finished runs
    are cached there. `jobs` defaults to every core here (1 runs in this process) or every
    CPU of the Ray cluster at `ray_address` ("local" starts one on this machine);
    `worker_env` sets environment variables in every worker.
    """
    base = _with_costs(_load_config(config), costs)
    plan = plan_sweep(
        base,
        params=params,
        random=random,
        sample_seed=sample_seed,
        seeds=seeds,
        workloads=workloads,
        traces=traces,
    )
    out_dir = Path(out) if out is not None else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    if jobs is not None and jobs < 1:
        raise ConfigError(f"jobs must be at least 1, got {jobs}")
    env = {str(k): str(v) for k, v in (worker_env or {}).items()}
    runs_cache = ResultCache(out_dir, "runs")
    baselines_cache = ResultCache(out_dir, "baselines")
    if ray_address is None:
        with _local_mapper(jobs=1, worker_env=env):
            _warm_up(plan, baselines_cache)
        engine = _local_mapper(jobs=jobs or available_cores(), worker_env=env)
    else:
        engine = _ray_mapper(jobs=jobs, ray_address=ray_address, worker_env=env)
    with engine as mapper:
        _execute(
            evaluate_baseline,
            plan.baselines(),
            baselines_cache,
            mapper=mapper,
            progress=progress,
            desc="baselines",
        )
        _execute(
            evaluate_run,
            [p.run for p in plan.runs],
            runs_cache,
            mapper=mapper,
            progress=progress,
            desc="runs",
        )
    table = _table(plan, runs_cache, baselines_cache)
    if out_dir is not None:
        _write_outputs(out_dir, table, base, plan)
    return table


def _write_outputs(
    out_dir: Path, table: pd.DataFrame, config: ScenarioConfig, plan: SweepPlan
) -> None:
    staging = out_dir / f".{RESULTS_FILENAME}.tmp"
    table.to_parquet(staging, index=False)
    staging.rename(out_dir / RESULTS_FILENAME)
    spec = {
        "format_version": SWEEP_FORMAT_VERSION,
        "params": plan.param_paths,
        "num_runs": len(plan.runs),
        "num_baselines": len(plan.baselines()),
        "config": config.model_dump(mode="json"),
    }
    (out_dir / SPEC_FILENAME).write_text(json.dumps(spec, indent=2))


def sweep_summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per setting (swept values, policy, workload), averaged over seeds, best first."""
    settings = [c for c in table.columns if "." in c] + ["policy", "workload"]
    grouped = table.groupby(settings, sort=False, dropna=False)
    summary = grouped.agg(
        runs=("seed", "size"),
        speedup=("speedup", "mean"),
        speedup_sd=("speedup", "std"),
        regret_frac=("regret_frac", "mean"),
        resizes=("num_resizes", "mean"),
        thrash=("thrash_count", "mean"),
        total_time_s=("total_time_s", "mean"),
    ).reset_index()
    return summary.sort_values("speedup", ascending=False, kind="stable").reset_index(drop=True)
