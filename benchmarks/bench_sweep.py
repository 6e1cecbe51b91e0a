"""The named benchmark sweep: 1,008 twin runs of 500 steps each, timed with 1 and N processes.

One workload (`growing_lengths`, 256 samples per step, on the 8-GPU, 8B-model cluster below),
the hysteresis controller over a grid of cooldown (7 values) x up threshold (12) x down threshold
(4) = 336 points, times 3 seeds. Each measurement starts from an empty output folder, so nothing
is resumed: it pays the baselines (3: one per seed), every run, writing the Parquet table and
the worker start-up. Target: at most 120 s on a 2-core machine; throughput should grow with the
number of processes.

    python benchmarks/bench_sweep.py [--jobs 1 2] [--steps 500]

Prints the figures and writes benchmarks/results/sweep.{json,md}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import tempfile
import time
from pathlib import Path

from dynaresize.twin.config import ScenarioConfig
from dynaresize.twin.sweeps.sweep import run_sweep

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_S = 120.0
SCENARIO = {
    "name": "bench-sweep",
    "cluster": {
        "gpus_per_node": 8,
        "intra_node_bandwidth_gbps": 300,
        "gpu_memory_gb": 96,
        "candidate_allocations": ["6:2", "5:3", "4:4", "3:5"],
        "initial_allocation": "6:2",
    },
    "model": {"num_params_b": 8},
    "workload": "growing_lengths",
    "policies": [{"kind": "hysteresis"}],
}
PARAMS = [
    "policy.cooldown_steps=0,2,5,8,12,16,24",
    "policy.up_threshold=" + ",".join(f"{0.025 * i:.3f}" for i in range(1, 13)),
    "policy.down_threshold=0.05,0.1,0.2,0.3",
]
NUM_SEEDS = 3


def _cpu_s() -> float:
    """CPU seconds of this process and of its finished workers: unlike wall time, what a
    sweep costs whatever else the machine is busy with."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def _parquet_available() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def measure(config: ScenarioConfig, *, jobs: int) -> dict:
    """One cold sweep: an empty output folder (no table written where pyarrow is missing)."""
    out = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    try:
        cpu_before = _cpu_s()
        start = time.perf_counter()
        table = run_sweep(
            config,
            params=PARAMS,
            seeds=NUM_SEEDS,
            out=out if _parquet_available() else None,
            jobs=jobs,
            progress=False,
        )
        wall_s = time.perf_counter() - start
        cpu_s = _cpu_s() - cpu_before
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {
        "jobs": jobs,
        "runs": len(table),
        "steps_per_run": int(table["num_steps"].iloc[0]),
        "wall_s": round(wall_s, 2),
        "runs_per_s": round(len(table) / wall_s, 2),
        "cpu_s": round(cpu_s, 2),
        "cpu_ms_per_run": round(1000 * cpu_s / len(table), 1),
        "within_target": wall_s <= TARGET_S,
        "mean_resizes": round(float(table["num_resizes"].mean()), 2),
        "table_digest": hashlib.sha256(table.to_csv().encode()).hexdigest()[:16],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where sweep.json/md go")
    parser.add_argument("--label", default="", help="suffix of the result files, e.g. h200")
    args = parser.parse_args()
    config = ScenarioConfig.model_validate({**SCENARIO, "simulation": {"num_steps": args.steps}})
    rows = [measure(config, jobs=jobs) for jobs in args.jobs]
    base = rows[0]["runs_per_s"]
    for row in rows:
        row["speedup_vs_first"] = round(row["runs_per_s"] / base, 2)
        print(
            f"jobs={row['jobs']}: {row['runs']} runs x {row['steps_per_run']} steps in "
            f"{row['wall_s']} s ({row['runs_per_s']} runs/s, x{row['speedup_vs_first']}; "
            f"{row['cpu_ms_per_run']} CPU-ms per run); "
            f"table {row['table_digest']}"
        )
    identical = len({r["table_digest"] for r in rows}) == 1
    print(f"identical tables across process counts: {identical}")
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    if args.label:
        machine += f" ({args.label})"
    record = {
        "benchmark": "sweep",
        "machine": machine,
        "params": PARAMS,
        "seeds": NUM_SEEDS,
        "target_s": TARGET_S,
        "identical_tables": identical,
        "parquet_written": _parquet_available(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "results": rows,
    }
    stem = f"sweep_{args.label}" if args.label else "sweep"
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"{stem}.json").write_text(json.dumps(record, indent=2) + "\n")
    lines = [
        f"Benchmark sweep: {rows[0]['runs']} runs of {rows[0]['steps_per_run']} steps "
        f"(one workload, cooldown x up x down threshold grid, {NUM_SEEDS} seeds), {machine}; "
        f"target {TARGET_S:.0f} s; 1-minute load average at the end: "
        f"{record['load_average_1min']}",
        "",
        "| processes | wall (s) | runs/s | speedup | CPU ms per run | within target |",
        "| ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['jobs']} | {r['wall_s']} | {r['runs_per_s']} | {r['speedup_vs_first']} | "
            f"{r['cpu_ms_per_run']} | "
            f"{'yes' if r['within_target'] else 'no'} |"
        )
    lines += ["", f"Identical tables across process counts: {'yes' if identical else 'no'}."]
    (args.results / f"{stem}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
