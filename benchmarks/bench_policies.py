"""Cost of one policy decision, for every registered policy, on a 1,000-boundary stream.

A twin run asks the policy once per step, so a 1,000-step sweep point pays this a thousand
times. Observations are built beforehand (the caller builds them in any case); the stream
wanders between rollout- and training-bound so every policy takes its busier branches, and
resizes take effect at the next boundary as in a pipeline.

    python benchmarks/bench_policies.py [--steps 1000 --repeats 5]

Prints the figures and writes benchmarks/results/policies_decide.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from dynaresize.policies import (
    Allocation,
    CandidatePrediction,
    StageTimes,
    StepObservation,
    build_policy,
    policy_kinds,
)

RESULTS = Path(__file__).resolve().parent / "results"
SPLITS = [Allocation.parse(s) for s in ("7:1", "6:2", "5:3", "4:4", "3:5", "2:6")]


def stage_times(step: int, allocation: Allocation) -> tuple[float, float]:
    """Rollout work that drifts up and down over the run; both stages scale with their GPUs."""
    rollout_work = 100.0 * (1.0 + 0.6 * math.sin(step / 40.0))
    return rollout_work / allocation.rollout_gpus, 160.0 / allocation.train_gpus


def observation(step: int, allocation: Allocation, measured: tuple[float, ...]) -> StepObservation:
    rollout_s, train_s = stage_times(step, allocation)
    candidates = tuple(
        CandidatePrediction(
            allocation=a,
            predicted_step_s=max(stage_times(step, a)),
            predicted_resize_critical_s=0.0 if a == allocation else 187.2,
        )
        for a in SPLITS
    )
    last = StageTimes(
        step=step,
        allocation=allocation,
        rollout_s=rollout_s,
        train_s=train_s,
        sync_s=1.0,
        step_s=max(rollout_s, train_s) + 1.0,
    )
    return StepObservation(
        step=step,
        now_s=step * 40.0,
        allocation=allocation,
        recent=(last,),
        candidates=candidates,
        measured_resize_costs_s=measured,
    )


def time_policy(config: dict, num_steps: int, repeats: int) -> dict:
    policy = build_policy(config)
    best_s = math.inf
    for _ in range(repeats):
        policy.reset()
        allocation, measured, elapsed_s, resizes = SPLITS[1], (), 0.0, 0
        for step in range(num_steps):
            obs = observation(step, allocation, measured)
            start = time.perf_counter()
            decision = policy.decide(obs)
            elapsed_s += time.perf_counter() - start
            if decision.is_resize:
                allocation, measured, resizes = decision.target, (*measured, 187.2), resizes + 1
        best_s = min(best_s, elapsed_s)
    return {
        "kind": config["kind"],
        "total_ms": best_s * 1e3,
        "per_decision_us": best_s / num_steps * 1e6,
        "resizes": resizes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    configs = [
        {"kind": k} if k != "scheduled" else {"kind": k, "schedule": "100@4:4;500@6:2"}
        for k in policy_kinds()
    ]
    rows = [time_policy(c, args.steps, args.repeats) for c in configs]
    lines = [
        f"Policy decisions over {args.steps} boundaries (best of {args.repeats}, observations "
        "built beforehand)",
        "",
        "| policy | total (ms) | per decision (us) | resizes |",
        "| --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r['total_ms']:.1f} | {r['per_decision_us']:.1f} | {r['resizes']} |"
        )
    table = "\n".join(lines)
    print(table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"num_steps": args.steps, "repeats": args.repeats, "results": rows}
    (RESULTS / "policies_decide.json").write_text(json.dumps(payload, indent=2) + "\n")
    (RESULTS / "policies_decide.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
