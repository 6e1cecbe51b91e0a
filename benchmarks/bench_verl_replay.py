"""Where the time of replaying a long veRL log goes, phase by phase, and the peak memory.

Writes a one-step-off veRL file-logger log of N steps (documented keys, lengths that drift), then
times, in one process, each phase `dynaresize run --mode replay` goes through: importing the
log, building the per-sample workload, fitting the stage costs, the twin's step-cost matrices,
the recorded run, one policy through the pipeline, and the offline optimum. CPU seconds are
reported beside wall seconds (on a shared machine the wall clock mostly measures waiting).

    python benchmarks/bench_verl_replay.py [--steps 200000]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def clock(label: str, fn, rows: list):
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    rows.append((label, time.process_time() - cpu, time.perf_counter() - wall))
    return out


def write_log(path: Path, num_steps: int, seed: int = 0) -> None:
    """One-step-off lines: responses grow from 500 to 1200 tokens, so generation overtakes
    training and the trainer starts to wait."""
    rng = np.random.default_rng(seed)
    prompt, samples, gpus = 200.0, 64, 8
    previous_train = 20.0
    with open(path, "w") as f:
        for k in range(1, num_steps + 1):
            response = 500.0 + 700.0 * (k - 1) / max(num_steps - 1, 1) + rng.normal(0, 20)
            tokens = int(samples * (prompt + response))
            generate = 2.0 + 0.03 * response + rng.normal(0, 0.3)
            train = 4.0 + tokens * 2.0e-4 + rng.normal(0, 0.2)
            wait = max(0.0, generate - previous_train)
            step_s = wait + 5.0 + train
            data = {
                "timing_s/gen": wait,
                "timing_s/generate_async": generate,
                "timing_s/sync_rollout_weights": 5.0,
                "timing_s/update_actor": train,
                "timing_s/step": step_s,
                "response_length/mean": response,
                "response_length/max": 4 * response,
                "prompt_length/mean": prompt,
                "perf/total_num_tokens": tokens,
                "perf/time_per_step": step_s,
                "perf/throughput": tokens / (step_s * gpus),
                "actor/entropy": 0.5,
            }
            f.write(json.dumps({"step": k, "data": data}) + "\n")
            previous_train = train


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200_000)
    args = parser.parse_args()
    from dynaresize.twin.analysis_context import context_from_config
    from dynaresize.twin.calibration.fit import fit_costs
    from dynaresize.twin.optimal import optimum_of_context
    from dynaresize.twin.run_facts import RunFacts
    from dynaresize.twin.simulation import build_context, simulate
    from dynaresize.twin.trace_source import open_trace, trace_workload

    rows: list = []
    facts = RunFacts(train_gpus=6, rollout_gpus=2, model_params_b=7.6)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "run.jsonl"
        clock("write the log", lambda: write_log(log, args.steps), rows)
        trace = clock("import the veRL log", lambda: open_trace(log, facts=facts), rows)
    context = context_from_config(None, [trace], facts=facts)
    workload, _ = clock("per-sample workload", lambda: trace_workload(trace), rows)
    fit = clock(
        "fit the stage costs",
        lambda: fit_costs(
            [trace],
            base=context.costs,
            model=context.model,
            sync_bandwidth_gbps=context.sync_bandwidth_gbps,
            workloads=[workload],
        ),
        rows,
    )
    scenario = context.scenario_for_steps(len(trace.steps)).model_copy(update={"costs": fit.costs})
    sim_context = clock(
        "step-cost matrices", lambda: build_context(scenario, workload=workload), rows
    )
    clock(
        "recorded run (matrix column)",
        lambda: sim_context.step_costs.step_s[
            :, sim_context.step_costs.index(context.initial)
        ].sum(),
        rows,
    )
    clock(
        "hysteresis through the pipeline",
        lambda: simulate(scenario, {"kind": "hysteresis"}, context=sim_context),
        rows,
    )
    clock("offline optimum", lambda: optimum_of_context(sim_context), rows)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"replay of a {args.steps:,}-step veRL log, phase by phase")
    print(f"{'phase':<36}{'CPU s':>10}{'wall s':>10}")
    for label, cpu, wall in rows:
        print(f"{label:<36}{cpu:>10.2f}{wall:>10.2f}")
    print(f"{'total (without writing the log)':<36}{sum(r[1] for r in rows[1:]):>10.2f}")
    print(f"peak resident memory: {peak_mb:,.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
