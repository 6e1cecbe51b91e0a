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
swept knobs; a policy that lacks one runs at its own settings as a reference row, and the
table's `attrs["notes"]` say so.
Each run is keyed by a hash of its resolved config, workload and seed; its static baselines
and offline optimum are keyed without the policy, so they are computed once per workload and seed
and shared. Runs that share that key share one context (workload, stage times, resize plans),
so the plan sends them to processes in groups (`SweepPlan.groups`), not one by one: a worker
builds the context once and advances the group's runs of one policy kind together where it can
(`tasks`). Groups run in local processes on all cores (`concurrent.futures`), or on a Ray
cluster when `ray_address` is given (Ray's multiprocessing pool); both hand back results in
submission order, so the table is the same either way. Finished runs are cached under
`out/cache/`, so a repeated or extended sweep only runs what is new.
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from dynaresize.config_io import ConfigError
from dynaresize.traces.staged_dir import (
    claim_output_dir,
    output_errors,
    record_output_entries,
    staged_dir,
)

from ..config import ScenarioConfig, load_config
from ..optimal import Regret
from .plan import SWEEP_FORMAT_VERSION, SweepPlan, plan_sweep
from .ray_probe import require_ray_cluster
from .space import SweepParam
from .store import CACHE_DIRNAME, ResultCache
from .tasks import GroupTask, evaluate_baseline, evaluate_group

RESULTS_FILENAME = "results.parquet"
SPEC_FILENAME = "sweep.json"
Mapper = Callable[[Callable, list], Iterable]
"""An ordered map of a function over tasks, in this process or in workers."""
TASKS_PER_WORKER_CHUNK = 8
"""Chunks per worker: large enough to amortise dispatch, small enough to balance the load."""


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
) -> Iterator[tuple[Mapper, int]]:
    """Ray's multiprocessing pool: one actor per worker on the cluster, ordered `imap`; and
    the number of workers."""
    import ray
    from ray.util.multiprocessing import Pool

    if not ray.is_initialized():
        ray.init(address=None if ray_address == "local" else ray_address, log_to_driver=False)
    remote_args = {"runtime_env": {"env_vars": worker_env}} if worker_env else None
    pool = Pool(processes=jobs, ray_remote_args=remote_args)
    num_workers = max(1, int(getattr(pool, "_processes", jobs or 1)))
    try:
        yield (
            lambda fn, tasks: pool.imap(fn, tasks, chunksize=_chunksize(len(tasks), num_workers)),
            num_workers,
        )
    finally:
        pool.terminate()


@contextlib.contextmanager
def _local_mapper(*, jobs: int, worker_env: dict[str, str]) -> Iterator[tuple[Mapper, int]]:
    """Processes on this machine (forked where the platform allows: they inherit the compiled
    kernels and imports of this one), ordered `map`, and their number; jobs=1 runs in this
    process."""
    if jobs == 1:
        saved = {k: os.environ.get(k) for k in worker_env}
        _set_environment(worker_env)
        try:
            yield map, 1
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
        yield (
            lambda fn, tasks: executor.map(fn, tasks, chunksize=_chunksize(len(tasks), jobs)),
            jobs,
        )


def _execute(
    groups: list[GroupTask],
    caches: tuple[ResultCache, ResultCache],
    *,
    mapper: Mapper,
    progress: bool,
) -> None:
    """Every group, its rows kept as each group finishes (an interrupted sweep keeps them)."""
    if not groups:
        return
    baselines, runs = caches
    total = sum(len(g.runs) for g in groups)
    try:
        with tqdm(total=total, desc="runs", disable=not progress, unit="run") as bar:
            for done in mapper(evaluate_group, groups):
                if done["baseline"] is not None:
                    baselines.add(done["baseline"])
                for row in done["runs"]:
                    runs.add(row)
                bar.update(len(done["runs"]))
    finally:
        baselines.flush()
        runs.flush()


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
    table = pd.DataFrame(rows)
    table.attrs["notes"] = list(plan.notes)
    return table


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
    extra_outputs: Callable[[pd.DataFrame, Path], object] | None = None,
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
    `worker_env` sets environment variables in every worker. `extra_outputs(table, folder)`
    writes more files (a figure) into the folder whose content lands in `out` with the table.

    `out` must be new, empty or an earlier sweep's folder; a Ray cluster at `ray_address` must
    answer within `ray_probe.RAY_CONNECT_TIMEOUT_S`. Both are checked before anything is created.
    A failure leaves `out` as it was (a new folder is removed); an interrupted sweep keeps the
    runs it finished in `out/cache/`.
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
    if jobs is not None and jobs < 1:
        raise ConfigError(f"jobs must be at least 1, got {jobs}")
    if ray_address is not None:
        require_ray_cluster(ray_address)
    env = {str(k): str(v) for k, v in (worker_env or {}).items()}
    out_dir = Path(out) if out is not None else None
    created = claim_output_dir(out_dir) if out_dir is not None else False
    cache_existed = out_dir is not None and (out_dir / CACHE_DIRNAME).is_dir()
    runs_cache = ResultCache(out_dir, "runs")
    baselines_cache = ResultCache(out_dir, "baselines")
    try:
        with output_errors(out_dir) if out_dir is not None else contextlib.nullcontext():
            table = _run_plan(
                plan,
                (baselines_cache, runs_cache),
                env=env,
                jobs=jobs,
                ray_address=ray_address,
                progress=progress,
            )
            if out_dir is not None:
                _write_outputs(out_dir, table, base, plan, extra_outputs)
    except Exception:
        # A failed sweep leaves its folder as it found it: a new folder goes, an earlier
        # sweep's folder loses the cache parts this one added. (An interrupted sweep keeps
        # them: finished runs are what a resumed sweep skips.)
        if out_dir is not None:
            _undo_partial_sweep(out_dir, created, cache_existed, [runs_cache, baselines_cache])
        raise
    return table


def _run_plan(
    plan: SweepPlan,
    caches: tuple[ResultCache, ResultCache],
    *,
    env: dict[str, str],
    jobs: int | None,
    ray_address: str | None,
    progress: bool,
) -> pd.DataFrame:
    """Every pending baseline and run of the plan, on local processes or Ray; the table."""
    baselines_cache, runs_cache = caches
    if ray_address is None:
        with _local_mapper(jobs=1, worker_env=env):
            _warm_up(plan, baselines_cache)
        engine = _local_mapper(jobs=jobs or available_cores(), worker_env=env)
    else:
        engine = _ray_mapper(jobs=jobs, ray_address=ray_address, worker_env=env)
    with engine as (mapper, num_workers):
        groups = plan.groups(
            runs_done=runs_cache, baselines_done=baselines_cache, num_workers=num_workers
        )
        _execute(groups, (baselines_cache, runs_cache), mapper=mapper, progress=progress)
    return _table(plan, runs_cache, baselines_cache)


def _undo_partial_sweep(
    out_dir: Path, created: bool, cache_existed: bool, caches: list[ResultCache]
) -> None:
    if created:
        shutil.rmtree(out_dir, ignore_errors=True)
        return
    for cache in caches:
        cache.discard_written()
    cache_dir = out_dir / CACHE_DIRNAME
    if not cache_existed and cache_dir.is_dir() and not any(cache_dir.iterdir()):
        cache_dir.rmdir()


def _write_outputs(
    out_dir: Path,
    table: pd.DataFrame,
    config: ScenarioConfig,
    plan: SweepPlan,
    extra_outputs: Callable[[pd.DataFrame, Path], object] | None,
) -> None:
    """results.parquet, sweep.json and the caller's extra files (a figure) land together,
    through a staging folder, or none of them does."""
    spec = {
        "format_version": SWEEP_FORMAT_VERSION,
        "params": plan.param_paths,
        "num_runs": len(plan.runs),
        "num_baselines": len(plan.baselines()),
        "config": config.model_dump(mode="json"),
    }
    record_output_entries(out_dir, [CACHE_DIRNAME])
    with staged_dir(out_dir, replace=False) as staging:
        table.to_parquet(staging / RESULTS_FILENAME, index=False)
        (staging / SPEC_FILENAME).write_text(json.dumps(spec, indent=2, allow_nan=False))
        if extra_outputs is not None:
            extra_outputs(table, staging)


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
