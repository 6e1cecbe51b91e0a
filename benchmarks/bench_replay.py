"""Speed of replaying a long trace and of the offline-optimal dynamic program.

Targets (issue: traces, replay, optimum): replaying a 5,000-step trace under one policy in at most
2 s; the offline optimum for 5,000 steps and 8 candidate splits in at most 2 s once the per-step
cost matrix exists (building the matrix is reported apart). Prints the figures and writes
benchmarks/results/replay.{json,md}.

    python benchmarks/bench_replay.py [--steps 5000] [--samples 128]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def clock(fn):
    """(result, CPU seconds, wall seconds) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def scenario(num_steps: int, samples: int, gpus: int, candidates: list[str], initial: str):
    from dynaresize.twin.config import ScenarioConfig

    return ScenarioConfig.model_validate(
        {
            "name": "bench_replay",
            "cluster": {
                "gpus_per_node": gpus,
                "intra_node_bandwidth_gbps": 400,
                "gpu_memory_gb": 96,
                "candidate_allocations": candidates,
                "initial_allocation": initial,
            },
            "model": {"num_params_b": 8},
            "workload": {"preset": "regime_switch", "samples_per_step": samples},
            "simulation": {"num_steps": num_steps},
        }
    )


def twin_trace(config, schedule):
    """A trace written by the twin: a scheduled run's steps plus the per-sample lengths."""
    from dynaresize.traces.io import Trace
    from dynaresize.traces.schema import RunMeta
    from dynaresize.twin.simulation import build_context, simulate
    from dynaresize.twin.trace_source import workload_samples

    context = build_context(config)
    result = simulate(config, {"kind": "scheduled", "schedule": schedule}, context=context)
    samples = workload_samples(context.workload)
    return Trace(
        meta=RunMeta(source="twin", model_params_b=8.0), steps=result.steps, samples=samples
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--samples", type=int, default=128)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    from dynaresize.traces.io import write_trace
    from dynaresize.twin.analysis.replay import replay_trace, run_replay
    from dynaresize.twin.analysis_context import context_from_config
    from dynaresize.twin.optimal import offline_optimum, uniform_resize_matrix
    from dynaresize.twin.step_costs import step_time_matrix
    from dynaresize.twin.trace_source import open_trace, trace_workload

    candidates = ["6:2", "5:3", "4:4", "3:5"]
    config = scenario(args.steps, args.samples, 8, candidates, "6:2")
    trace = twin_trace(config, [{"step": args.steps // 3, "allocation": "4:4"}])
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace"
        write_trace(path, trace)
        run_replay(trace=path, config=None, policies=["hysteresis"])  # warm caches
        _, cpu, wall = clock(lambda: run_replay(trace=path, policies=["hysteresis"]))
        rows["run_replay, one policy (read, fit, replay, statics, optimum)"] = (cpu, wall)
        loaded, cpu, wall = clock(lambda: open_trace(path))
        rows["  of which reading the trace"] = (cpu, wall)
        _, cpu, wall = clock(lambda: trace_workload(loaded))
        rows["  of which per-sample workload from the trace"] = (cpu, wall)
        context = context_from_config(config, [loaded])
        _, cpu, wall = clock(lambda: replay_trace(loaded, context, policies=["hysteresis"]))
        rows["replay_trace, one policy (trace in memory, with fit)"] = (cpu, wall)
        _, cpu, wall = clock(
            lambda: replay_trace(loaded, context, policies=["hysteresis"], fit_to_trace=False)
        )
        rows["replay_trace, one policy (trace in memory, costs given)"] = (cpu, wall)
        out = Path(tmp) / "out"
        _, cpu, wall = clock(lambda: run_replay(trace=path, policies=["hysteresis"], out_dir=out))
        rows["run_replay with --out (csv, json, parquet, png)"] = (cpu, wall)

    # The dynamic program on 8 candidates: a 16-GPU node split eight ways.
    eight = ["12:4", "11:5", "10:6", "9:7", "8:8", "7:9", "6:10", "5:11"]
    big = scenario(args.steps, args.samples, 16, eight, "12:4")
    from dynaresize.traces.synthetic import generate_workload

    workload = generate_workload(big.workload, args.steps, 0)
    matrix, cpu, wall = clock(
        lambda: step_time_matrix(
            workload,
            candidates=big.cluster.candidate_allocations,
            cluster=big.cluster,
            model=big.model,
            costs=big.costs,
            pipeline=big.pipeline,
        )
    )
    rows[f"per-step matrix, {args.steps} x 8 (built once)"] = (cpu, wall)
    resize = uniform_resize_matrix(8, 187.2)
    offline_optimum(matrix, resize, initial_index=0)  # warm
    optimum, cpu, wall = clock(lambda: offline_optimum(matrix, resize, initial_index=0))
    rows[f"offline optimum, {args.steps} x 8"] = (cpu, wall)

    load = round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None
    for name, (cpu, wall) in rows.items():
        print(f"{name:<62} {cpu:7.3f} s CPU {wall:7.3f} s wall")
    print(f"(one core; load average {load}; optimum makes {optimum.num_resizes} resizes)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "steps": args.steps,
        "samples_per_step": args.samples,
        "load_average_1min": load,
        "rows": [{"what": k.strip(), "cpu_s": c, "wall_s": w} for k, (c, w) in rows.items()],
        "targets_s": {"replay_one_policy": 2.0, "offline_optimum_5000x8": 2.0},
    }
    (RESULTS / "replay.json").write_text(json.dumps(payload, indent=2))
    lines = [
        "# Replay and offline-optimum speed",
        "",
        f"{args.steps}-step trace written by the twin ({args.samples} samples per step, per-sample "
        f"lengths recorded), 8 GPUs; one core, shared machine (load average {load}). "
        "`python benchmarks/bench_replay.py`. Targets: replay under one policy <= 2 s; optimum "
        "5,000 x 8 <= 2 s once the matrix exists.",
        "",
        "| what | CPU (s) | wall (s) |",
        "|---|---|---|",
    ]
    lines += [f"| {k.strip()} | {c:.3f} | {w:.3f} |" for k, (c, w) in rows.items()]
    (RESULTS / "replay.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
