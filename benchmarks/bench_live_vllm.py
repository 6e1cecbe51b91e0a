"""The live run with vLLM as the rollout engine against the project's own sampler, on CPU.

Runs the built-in `live_cpu_vllm` and `live_cpu` configs one after the other (each in a Ray of
its own) and reports, for each:
- the start-up of the whole run: Ray and the worker actors, the world group, the models, the
  roles (where the replicas' engines start), the first weight sync, and the time to the first
  step; for vLLM each engine process's start split into interpreter, imports and engine build;
- every resize's phases (seconds, critical or not) and its critical path (first critical phase
  start to last critical phase end);
- the steps' duration and the engine-vs-trainer logprob gap.

The two configs differ in more than the engine (live_cpu: 4 workers, tiny model, 8 steps;
live_cpu_vllm: 3 workers, a model with a head size vLLM's CPU attention supports, 5 steps), so
compare phase by phase: rollout_reinit and rollout_release are the engine's, the others move
trainer state.

    PYTHONPATH=. python benchmarks/bench_live_vllm.py
writes benchmarks/results/live_vllm.json and live_vllm.md (load average in both: on a shared
2-core machine every figure is rough).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
CONFIGS = ("live_cpu_vllm", "live_cpu")


def run_one(name: str, scratch: Path) -> dict[str, Any]:
    """One built-in live run; its start-up, resizes and steps as plain numbers."""
    import ray

    from dynaresize.config import load_run_config
    from dynaresize.executor.cluster.ray_cluster import start
    from dynaresize.executor.cluster.runtime import Runtime
    from dynaresize.executor.driver import LiveSession
    from dynaresize.executor.strategies.catalog import live_worker_class
    from dynaresize.executor.worker.actor import LiveWorker
    from dynaresize.traces.io import read_trace

    live = load_run_config(name).live
    assert live is not None
    out = scratch / name
    out.mkdir(parents=True)
    load_before = os.getloadavg()
    begin = time.perf_counter()
    cluster = start(live, address=None, actor_cls=live_worker_class())
    cluster_s = time.perf_counter() - begin
    try:
        runtime = Runtime.for_cluster(cluster, live)
        session = LiveSession(live, runtime, out, None, None, notes=cluster.notes)
        try:
            session.run()
            infos = runtime.call(runtime.all_ids, LiveWorker.info).wait("asking the workers")
        finally:
            session.close()
    finally:
        cluster.shutdown()
        if ray.is_initialized():
            ray.shutdown()
    total_s = time.perf_counter() - begin
    trace = read_trace(out / "trace")
    setup = json.loads((out / "setup.json").read_text())
    steps = trace.steps
    first_step_start_s = float(steps.start_s.iloc[0])
    resizes = []
    for resize_id, group in trace.resizes.groupby("resize_id"):
        critical = group[group.critical.astype(bool)]
        resizes.append(
            {
                "resize_id": int(resize_id),
                "after_step": int(group.step.iloc[0]),
                "phases_s": {
                    row.phase: round(float(row.end_s - row.start_s), 4)
                    for row in group.itertuples()
                    if bool(row.critical)
                },
                "background_phases_s": {
                    row.phase: round(float(row.end_s - row.start_s), 4)
                    for row in group.itertuples()
                    if not bool(row.critical)
                },
                "critical_path_s": round(float(critical.end_s.max() - critical.start_s.min()), 4),
            }
        )
    allocations = [f"{t}:{r}" for t, r in zip(steps.train_gpus, steps.rollout_gpus, strict=True)]
    for resize in resizes:
        k = resize["after_step"]
        resize["move"] = f"{allocations[k]} -> {allocations[k + 1]}"
    gaps = steps.engine_logprob_abs_diff_mean.to_numpy(float)
    return {
        "config": name,
        "engine": live.rollout_engine.kind.value,
        "release": live.rollout_engine.release.value,
        "num_workers": live.num_workers,
        "num_steps": live.num_steps,
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "startup": {
            "ray_and_placement_s": round(cluster_s, 3),
            **{k: round(float(v), 3) for k, v in setup.items()},
            "until_first_step_s": round(cluster_s + first_step_start_s, 3),
        },
        "engine_starts": {
            str(w): info["rollout_engine_starts"] for w, info in sorted(infos.items())
        },
        "engines_built": {str(w): info["rollout_engines_built"] for w, info in infos.items()},
        "resizes": resizes,
        "step_s": [round(float(v), 3) for v in steps.step_s],
        "engine_logprob_abs_diff_mean": [None if v != v else round(float(v), 6) for v in gaps],
        "total_s": round(total_s, 3),
    }


def markdown(results: list[dict[str, Any]], command: str) -> str:
    lines = [
        "# The live run with vLLM against the own sampler (CPU)",
        "",
        f"`{command}` on {platform.node() or 'this machine'} ({os.cpu_count()} cores); load "
        "average before/after each run below: the machine was shared, so every figure is rough.",
        "",
    ]
    for r in results:
        lines += [
            f"## {r['config']} (engine {r['engine']}, release {r['release']}, "
            f"{r['num_workers']} workers, {r['num_steps']} steps)",
            "",
            f"Load average {r['load_average_before']} -> {r['load_average_after']}; whole run "
            f"{r['total_s']:.1f} s.",
            "",
            "| start-up part | s |",
            "|---|---|",
            *(f"| {k} | {v:.2f} |" for k, v in r["startup"].items()),
            "",
        ]
        starts = [(w, s) for w, items in r["engine_starts"].items() for s in items]
        if starts and "import_s" in starts[0][1]:
            lines += [
                "| worker | engine process start s | interpreter s | imports s | engine build s |",
                "|---|---|---|---|---|",
                *(
                    f"| {w} | {s['total_s']:.2f} | {s['process_s']:.2f} | {s['import_s']:.2f} | "
                    f"{s['engine_s']:.2f} |"
                    for w, s in starts
                ),
                "",
            ]
        for resize in r["resizes"]:
            phases = ", ".join(f"{p} {s:.3f}" for p, s in resize["phases_s"].items())
            lines.append(
                f"- resize {resize['resize_id']} ({resize['move']}, after step "
                f"{resize['after_step']}): critical path {resize['critical_path_s']:.2f} s; "
                f"{phases}"
            )
        lines += [
            "",
            f"Steps (s): {', '.join(f'{v:.2f}' for v in r['step_s'])}. Engine vs trainer "
            f"logprob gap per step (nats): {r['engine_logprob_abs_diff_mean']}.",
            "",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-live-vllm-"))
    try:
        results = [run_one(name, scratch) for name in args.configs]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    command = "PYTHONPATH=. python benchmarks/bench_live_vllm.py"
    if args.configs != list(CONFIGS):
        command += " --configs " + " ".join(args.configs)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "live_vllm.json").write_text(
        json.dumps({"command": command, "runs": results}, indent=2) + "\n"
    )
    (args.results / "live_vllm.md").write_text(markdown(results, command))
    print(markdown(results, command))


if __name__ == "__main__":
    main()
