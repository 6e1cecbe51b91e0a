"""The named benchmark sweep: 1,008 twin runs of 500 steps each, timed with 1 and N processes.

One workload (`growing_lengths`, 256 samples per step, on the tests' 8-GPU cluster of
tests/twin_scenarios.py with an 8B model), the hysteresis controller over a grid of cooldown
(7 values) x up threshold (12) x down threshold (4) = 336 points, times 3 seeds. Each measurement
starts from an empty output folder, so nothing is resumed: it pays the three contexts and
baselines (one per seed), every run, writing the Parquet table and the worker start-up (the
interpreter and the imports of this process are not in it). Target: at most 4 s on 2 processes;
the CPU milliseconds per run say what the sweep costs whatever else the machine runs.

The runs are also checked against `simulate()`: `--check N` rows spread over the table are
simulated one by one, and every measure must be equal, to the last bit.

    python benchmarks/bench_sweep.py [--jobs 1 2] [--steps 500] [--check 24]

Prints the figures and writes benchmarks/results/sweep.{json,md}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from dynaresize.twin.config import ScenarioConfig
from dynaresize.twin.sweeps.space import apply_overrides
from dynaresize.twin.sweeps.sweep import run_sweep
from dynaresize.twin.sweeps.tasks import RUN_MEASURES

RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(RESULTS.parent.parent / "tests"))  # the tests' scenarios (twin_scenarios)
TARGET_S = 4.0
WORKLOAD = "growing_lengths"
SAMPLES_PER_STEP = 256
CLUSTER = {"intra_node_bandwidth_gbps": 300}
"""The tests' 8-GPU cluster on a 300 GB/s link."""
PARAMS = [
    "policy.cooldown_steps=0,2,5,8,12,16,24",
    "policy.up_threshold=" + ",".join(f"{0.025 * i:.3f}" for i in range(1, 13)),
    "policy.down_threshold=0.05,0.1,0.2,0.3",
]
NUM_SEEDS = 3


def scenario(num_steps: int) -> ScenarioConfig:
    from twin_scenarios import preset_scenario

    return preset_scenario(
        WORKLOAD,
        samples_per_step=SAMPLES_PER_STEP,
        num_steps=num_steps,
        name="bench-sweep",
        cluster=CLUSTER,
        policies=[{"kind": "hysteresis"}],
    )


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


def measure(config: ScenarioConfig, *, jobs: int) -> tuple[dict, pd.DataFrame]:
    """One cold sweep: an empty output folder (no table written where pyarrow is missing)."""
    out = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    try:
        cpu_before = _cpu_s()
        start = time.perf_counter()
        table = run_sweep(
            config,
            params=PARAMS,
            seeds=NUM_SEEDS,
            out=out / "sweep" if _parquet_available() else None,
            jobs=jobs,
            progress=False,
        )
        wall_s = time.perf_counter() - start
        cpu_s = _cpu_s() - cpu_before
    finally:
        shutil.rmtree(out, ignore_errors=True)
    row = {
        "jobs": jobs,
        "runs": len(table),
        "steps_per_run": int(table["num_steps"].iloc[0]),
        "wall_s": round(wall_s, 2),
        "runs_per_s": round(len(table) / wall_s, 2),
        "cpu_s": round(cpu_s, 2),
        "cpu_ms_per_run": round(1000 * cpu_s / len(table), 2),
        "within_target": wall_s <= TARGET_S,
        "mean_resizes": round(float(table["num_resizes"].mean()), 2),
        "table_digest": hashlib.sha256(table.to_csv().encode()).hexdigest()[:16],
    }
    return row, table


def check_against_simulate(config: ScenarioConfig, table: pd.DataFrame, num_rows: int) -> int:
    """Rows spread over the table, each simulated on its own: the rows whose measures differ
    from `simulate()`'s summary in any bit."""
    from dynaresize.twin.simulation import build_context, simulate

    if num_rows <= 0:
        return 0
    picks = sorted({round(i * (len(table) - 1) / max(1, num_rows - 1)) for i in range(num_rows)})
    contexts: dict[int, object] = {}
    differing = 0
    for i in picks:
        row = table.iloc[i]
        point = {p: row[p] for p in table.columns if p.startswith("policy.")}
        point = {k: (int(v) if k.endswith("_steps") else float(v)) for k, v in point.items()}
        seed = int(row["seed"])
        resolved = apply_overrides(config, point, policy_index=0)
        if seed not in contexts:
            contexts[seed] = build_context(resolved, seed=seed)
        summary = simulate(resolved, resolved.policies[0], context=contexts[seed]).summary
        same = all(row[c] == getattr(summary, f) for c, (f, _) in RUN_MEASURES.items())
        named = summary.speedup_vs_baseline
        got = row["speedup_vs_named_baseline"]
        same &= (named is None and math.isnan(got)) or got == named
        differing += not same
    return differing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--check", type=int, default=24, help="rows checked against simulate()")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where sweep.json/md go")
    parser.add_argument("--label", default="", help="suffix of the result files, e.g. h200")
    args = parser.parse_args()
    config = scenario(args.steps)
    load_start = round(os.getloadavg()[0], 2)
    measured = [measure(config, jobs=jobs) for jobs in args.jobs]
    rows = [row for row, _ in measured]
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
    differing = check_against_simulate(config, measured[-1][1], args.check)
    print(f"rows checked against simulate(): {args.check}, differing: {differing}")
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
        "rows_checked_against_simulate": args.check,
        "rows_differing_from_simulate": differing,
        "parquet_written": _parquet_available(),
        "load_average_1min": load_start,
        "load_average_end": round(os.getloadavg()[0], 2),
        "results": rows,
    }
    stem = f"sweep_{args.label}" if args.label else "sweep"
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"{stem}.json").write_text(json.dumps(record, indent=2) + "\n")
    lines = [
        f"Benchmark sweep: {rows[0]['runs']} runs of {rows[0]['steps_per_run']} steps "
        f"(one workload, cooldown x up x down threshold grid, {NUM_SEEDS} seeds), {machine}; "
        f"target {TARGET_S:g} s; 1-minute load average {load_start} at the start, "
        f"{record['load_average_end']} at the end (`python benchmarks/bench_sweep.py`).",
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
    lines += [
        "",
        f"Identical tables across process counts: {'yes' if identical else 'no'}. "
        f"Rows checked against `simulate()` run by run: {args.check}, differing: {differing}.",
    ]
    (args.results / f"{stem}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
