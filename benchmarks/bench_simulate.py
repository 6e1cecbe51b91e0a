"""How long simulate() and the `dynaresize run` command take.

Figures (least CPU seconds of several repeats, after one warm-up call so that the numba kernel of
the rollout model is compiled; the first call's time is reported separately as compile time):

- example_context_s / example_simulate_s: `build_context` (every stage time on every candidate)
  and `simulate` of one policy for the built-in example (target: simulate() of the example < 1 s,
  context included); a context is timed cold, its per-process cache emptied before each build
  (`twin/context_cache.py`);
- first_call_incl_compile_s: the first simulate() in a process, which loads (or, when the disk
  cache misses, compiles) the numba rollout kernel;
- big_*: a 1000-step, 512-samples-per-step, 8-GPU run of one policy (hysteresis), with the default
  KV-limited rollout model and with unlimited concurrency; `big_*_pipeline_s` is the per-policy
  part (SimPy pipeline, observations, policy calls, record tables) given the context;
  `big_*_total_s` the cold context plus the pipeline, and `big_*_simulate_again_s` a whole
  `simulate(config, policy)` of a scenario simulated before in the process (the context kept:
  what a notebook trying one parameter value after another pays per call);
- big_kv_limited_fresh_*: the same KV-limited context built first thing in a fresh process
  (`fresh_process_context`): importing numba, then the context with the kernel's load from
  numba's disk cache;
- cli_run*_s: wall time (and cli_run*_cpu_s, CPU time: what the wall time would be on an
  otherwise idle core) of `dynaresize run --mode sim --config example --out DIR` in a fresh process,
  imports, both policies, every file and the PNGs included (target < 5 s); run twice, the first
  may include compiling the rollout kernel.

    python benchmarks/bench_simulate.py     # prints, writes benchmarks/results/simulate.{json,md}
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The records' library, loaded up front (as importing the twin once did), so that
# `first_call_incl_compile_s` times the rollout kernel's load, not pandas'.
import pandas  # noqa: F401

from dynaresize.config import load_run_config
from dynaresize.twin.config import ScenarioConfig
from dynaresize.twin.context_cache import clear_context_cache
from dynaresize.twin.simulation import build_context, simulate

ROOT = Path(__file__).resolve().parent.parent
REPEATS = 5


def best_of(fn, repeats: int = REPEATS) -> float:
    """Least CPU time of this process over the repeats: the figure an idle core would show
    (this machine is shared, so wall time mostly measures the neighbours)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def cold_context(config: ScenarioConfig) -> None:
    """A context built from nothing: the per-process cache emptied first."""
    clear_context_cache()
    build_context(config)


def big_config(*, kv_limited: bool) -> ScenarioConfig:
    data = load_run_config("example").model_dump(mode="json")
    data.pop("live"), data.pop("output")
    data["simulation"]["num_steps"] = 1000
    data["workload"] = {"preset": "high_variance", "samples_per_step": 512}
    data["costs"]["rollout"] = {} if kv_limited else {"kv_capacity_tokens_per_replica": None}
    return ScenarioConfig.model_validate(data)


_FRESH_CONTEXT = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from bench_simulate import big_config
from dynaresize.twin.simulation import build_context
import pandas  # the context's step table: the libraries' imports are not its cost
cfg = big_config(kv_limited=True)
start = time.process_time()
import numba
numba_s = time.process_time() - start
start = time.process_time()
build_context(cfg)
print(json.dumps({"numba_import_s": numba_s, "context_s": time.process_time() - start}))
"""


def fresh_process_context() -> dict[str, float]:
    """The first KV-limited 1000-step context in a fresh process (least of 3 processes): the
    figures above are taken once the process has loaded numba's kernel, which a one-off script
    pays as well. `numba_import_s` is importing numba; the context's own figure then includes
    loading the compiled kernel from numba's disk cache (compiled by the calls above)."""
    runs = []
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", _FRESH_CONTEXT, str(Path(__file__).resolve().parent)],
            check=True,
            capture_output=True,
            text=True,
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r["numba_import_s"] + r["context_s"])
    return {
        "big_kv_limited_fresh_numba_import_s": best["numba_import_s"],
        "big_kv_limited_fresh_context_s": best["context_s"],
    }


def main() -> None:
    if hasattr(os, "sched_setaffinity"):  # one core, as the speed targets are stated
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    figures: dict[str, float] = {}
    example = load_run_config("example")
    policy = example.policies[0]

    start = time.process_time()
    simulate(example, policy)
    figures["first_call_incl_compile_s"] = time.process_time() - start

    figures["example_context_s"] = best_of(lambda: cold_context(example))
    ctx = build_context(example)
    figures["example_simulate_s"] = best_of(lambda: simulate(example, policy, context=ctx))
    figures["example_total_s"] = best_of(lambda: (clear_context_cache(), simulate(example, policy)))

    for label, kv in (("kv_limited", True), ("unlimited", False)):
        cfg = big_config(kv_limited=kv)
        build_context(cfg)
        figures[f"big_{label}_context_s"] = best_of(lambda cfg=cfg: cold_context(cfg), 3)
        big_ctx = build_context(cfg)
        figures[f"big_{label}_pipeline_s"] = best_of(
            lambda cfg=cfg, c=big_ctx: simulate(cfg, {"kind": "hysteresis"}, context=c), 3
        )
        figures[f"big_{label}_total_s"] = (
            figures[f"big_{label}_context_s"] + figures[f"big_{label}_pipeline_s"]
        )
        figures[f"big_{label}_simulate_again_s"] = best_of(
            lambda cfg=cfg: simulate(cfg, {"kind": "hysteresis"}), 3
        )

    figures.update(fresh_process_context())

    with tempfile.TemporaryDirectory() as tmp:
        for attempt in (1, 2):
            start = time.perf_counter()
            cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "dynaresize.cli",
                    "run",
                    "--mode",
                    "sim",
                    "--config",
                    "example",
                    "--out",
                    os.path.join(tmp, f"run{attempt}"),
                ],
                check=True,
                capture_output=True,
            )
            figures[f"cli_run{attempt}_s"] = time.perf_counter() - start
            cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
            figures[f"cli_run{attempt}_cpu_s"] = (cpu_after.ru_utime - cpu_before.ru_utime) + (
                cpu_after.ru_stime - cpu_before.ru_stime
            )

    for key, value in figures.items():
        print(f"{key:>32}: {value:8.3f} s")
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "load_average_1min": os.getloadavg()[0],
        "pinned_cores": 1,
    }
    (out / "simulate.json").write_text(json.dumps({"figures_s": figures, **meta}, indent=2) + "\n")
    rows = "\n".join(f"| {k} | {v:.3f} |" for k, v in figures.items())
    (out / "simulate.md").write_text(
        "# simulate() and CLI timings\n\n"
        "`python benchmarks/bench_simulate.py`, pinned to one core of a "
        f"{meta['cpu_count']}-core machine shared with other work (load average "
        f"{meta['load_average_1min']:.1f} while measuring), Python "
        f"{meta['python']}; CPU seconds, least of {REPEATS} repeats (3 for the 1000-step "
        "runs); contexts timed cold (cache emptied), `*_simulate_again_s` with the context "
        "kept from an earlier call; the CLI rows give wall time and CPU time of a fresh "
        "process.\n\n"
        "| figure | seconds |\n|---|---:|\n" + rows + "\n"
    )


if __name__ == "__main__":
    main()
