"""Speed of the rollout cost model and of a whole simulate() run that leans on it.

Target (issue: fast rollout model): a 1,000-step run of one policy on 8 GPUs with 512 samples per
step takes at most 0.25 s with KV-limited concurrency and at most 0.1 s with unlimited
concurrency, on one core, compilation excluded. Prints the figures and writes
benchmarks/results/rollout.{json,md}.

    python benchmarks/bench_rollout.py [--steps 1000] [--samples 512] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(RESULTS.parent.parent / "tests"))  # the tests' scenarios (twin_scenarios)

COMPILE_SNIPPET = """
import time, numpy as np
t0 = time.process_time()
from dynaresize.twin.costs import rollout_kernels
kernel = rollout_kernels._numba_kernel()
t1 = time.process_time()
a = np.arange(8, dtype=np.int64)
kernel(a, a, np.array([0], np.int64), np.array([8], np.int64), True, 2)
t2 = time.process_time()
kernel(a, a, np.array([0], np.int64), np.array([8], np.int64), True, 2)
t3 = time.process_time()
print((t2 - t1) - (t3 - t2))
"""


def first_call_s(cache_dir: str) -> float:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run(
        [sys.executable, "-c", COMPILE_SNIPPET], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def timed(fn, repeats: int) -> float:
    """Least CPU seconds of `fn` over the repeats (process time: what one core spends).

    On a machine shared with other work, neighbours inflate even CPU time (shared caches and
    memory bandwidth), never deflate it: the least repeat is the closest to an idle core. The
    median is kept too (MEDIAN_S) and written to the JSON and the table.
    """
    samples, walls = [], []
    for _ in range(repeats):
        start, wall = time.process_time(), time.perf_counter()
        fn()
        samples.append(time.process_time() - start)
        walls.append(time.perf_counter() - wall)
    WALL_S.append(statistics.median(walls))
    MEDIAN_S.append(statistics.median(samples))
    return min(samples)


WALL_S: list[float] = []
MEDIAN_S: list[float] = []


def scenario(num_steps: int, samples: int, kv_capacity: int | None):
    from twin_scenarios import preset_scenario

    return preset_scenario(
        "high_variance",
        samples_per_step=samples,
        num_steps=num_steps,
        name="bench_rollout",
        costs={"rollout": {"kv_capacity_tokens_per_replica": kv_capacity}},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    with tempfile.TemporaryDirectory() as cache:
        compile_s = first_call_s(cache)
        cache_load_s = first_call_s(cache)

    from dynaresize.traces.synthetic import generate_workload
    from dynaresize.twin.costs.rollout import (
        rollout_stage_s,
        rollout_stage_s_many,
    )
    from dynaresize.twin.costs.rollout_kernels import KernelBackend
    from dynaresize.twin.simulation import build_context, simulate

    rows = []
    for label, kv in (("KV-limited", 450_000), ("unlimited", None)):
        config = scenario(args.steps, args.samples, kv)
        workload = generate_workload(config.workload, args.steps, 0)
        params = config.costs.rollout
        replicas = sorted({c.rollout_gpus for c in config.cluster.candidate_allocations})
        concurrency = params.max_concurrent_seqs

        def all_candidates(backend, w=workload, p=params, r=replicas):
            for n in r:
                rollout_stage_s_many(w, num_replicas=n, params=p, backend=backend)

        all_candidates(KernelBackend.NUMBA)  # warm
        numba_s = timed(lambda: all_candidates(KernelBackend.NUMBA), args.repeats)
        numpy_s = timed(lambda: all_candidates(KernelBackend.NUMPY), max(1, args.repeats // 2))
        reference_steps = min(50, args.steps)
        start = time.process_time()
        for k in range(reference_steps):
            for n in replicas:
                rollout_stage_s(*workload.step(k), num_replicas=n, params=params)
        reference_s = (time.process_time() - start) * args.steps / reference_steps
        simulate(config, {"kind": "static"})  # warm imports and caches
        generate_s = timed(lambda c=config: generate_workload(c.workload, args.steps, 0), 3)
        context_s = timed(lambda c=config, w=workload: build_context(c, workload=w), 3)
        ctx = build_context(config, workload=workload)
        pipeline_s = timed(lambda c=config, x=ctx: simulate(c, {"kind": "static"}, context=x), 3)
        static_s = timed(lambda c=config: simulate(c, {"kind": "static"}), args.repeats)
        static_wall_s, static_median_s = WALL_S[-1], MEDIAN_S[-1]
        hysteresis_s = timed(lambda c=config: simulate(c, {"kind": "hysteresis"}), args.repeats)
        hysteresis_median_s = MEDIAN_S[-1]
        target_s = 0.25 if kv is not None else 0.1
        rows.append(
            {
                "concurrency": label,
                "max_concurrent_seqs": concurrency,
                "steps": args.steps,
                "samples_per_step": args.samples,
                "candidates": len(config.cluster.candidate_allocations),
                "rollout_all_candidates_numba_s": numba_s,
                "rollout_all_candidates_numpy_s": numpy_s,
                "rollout_all_candidates_reference_s_extrapolated": reference_s,
                "generate_workload_s": generate_s,
                "build_context_s": context_s,
                "pipeline_and_tables_s": pipeline_s,
                "simulate_static_s": static_s,
                "simulate_static_wall_s": static_wall_s,
                "simulate_static_median_s": static_median_s,
                "simulate_hysteresis_s": hysteresis_s,
                "simulate_hysteresis_median_s": hysteresis_median_s,
                "target_s": target_s,
                "meets_target": max(static_s, hysteresis_s) <= target_s,
            }
        )
        print(
            f"{label:>10} (C={concurrency}): rollout, {len(replicas)} replica counts: numba "
            f"{numba_s * 1e3:.1f} ms, numpy {numpy_s * 1e3:.1f} ms, reference ~{reference_s:.2f} s;"
            f" simulate() static {static_s * 1e3:.0f} ms, hysteresis {hysteresis_s * 1e3:.0f} ms"
            f" (target {target_s * 1e3:.0f} ms); of which workload generation "
            f"{generate_s * 1e3:.0f} ms, build_context {context_s * 1e3:.0f} ms (rollout "
            f"{numba_s * 1e3:.0f} ms), pipeline and tables {pipeline_s * 1e3:.0f} ms"
        )
    print(
        f"numba compile (first call, empty cache): {compile_s:.2f} s; load from cache: "
        f"{cache_load_s:.3f} s"
    )

    RESULTS.mkdir(parents=True, exist_ok=True)
    load = round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None
    payload = {
        "rows": rows,
        "numba_compile_s": compile_s,
        "numba_cache_load_s": cache_load_s,
        "cores": 1,
        "machine": os.uname().machine,
    }
    (RESULTS / "rollout.json").write_text(json.dumps(payload, indent=2))
    lines = [
        "# Rollout model and simulate() speed",
        "",
        f"{args.steps} steps, {args.samples} samples per step, 8 GPUs, 4 candidate splits, one "
        "core, compilation excluded; CPU time of the process, least of "
        f"{args.repeats} repeats (3 for generation, context and pipeline; the simulate columns "
        "also give the median) — the machine was shared with other work (load average "
        f"{load}), which inflates even CPU time. `python benchmarks/bench_rollout.py`",
        "",
        "| concurrency | rollout, numba (ms) | rollout, numpy (ms) | rollout, reference (s, est.) "
        "| workload gen (ms) | build_context (ms) | pipeline+tables (ms) "
        "| simulate static, least / median (ms) | simulate hysteresis, least / median (ms) "
        "| target (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['concurrency']} (C={r['max_concurrent_seqs']}) "
            f"| {r['rollout_all_candidates_numba_s'] * 1e3:.1f} "
            f"| {r['rollout_all_candidates_numpy_s'] * 1e3:.1f} "
            f"| {r['rollout_all_candidates_reference_s_extrapolated']:.2f} "
            f"| {r['generate_workload_s'] * 1e3:.0f} | {r['build_context_s'] * 1e3:.0f} "
            f"| {r['pipeline_and_tables_s'] * 1e3:.0f} "
            f"| {r['simulate_static_s'] * 1e3:.0f} / {r['simulate_static_median_s'] * 1e3:.0f} "
            f"| {r['simulate_hysteresis_s'] * 1e3:.0f} / "
            f"{r['simulate_hysteresis_median_s'] * 1e3:.0f} "
            f"| {r['target_s'] * 1e3:.0f} |"
        )
    lines += [
        "",
        f"numba compile on first use: {compile_s:.2f} s (cached on disk afterwards; "
        f"loading the cache: {cache_load_s:.3f} s).",
    ]
    (RESULTS / "rollout.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
