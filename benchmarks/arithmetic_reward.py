"""Mean reward per step of the built-in `live_cpu_arithmetic` config, for several seeds.

Each seed is one real live run (`run_live`) of the config as shipped: 4 CPU workers on Ray, the
warm-started arithmetic model, prompts from the shipped Parquet file, the built-in `final_number`
reward, resizes by the scheduled policy. The seed (`live.seed`) draws the prompt order and the
samples; the model's start is the same folder for every seed. The reward of every sample is read
back from the batches the run records.

    python tools/make_arithmetic_model.py --out ~/.cache/dynaresize/models/arithmetic-warm-v2 \
        --warm-start-steps 400
    python benchmarks/arithmetic_reward.py

Writes arithmetic_reward.json and arithmetic_reward.md to --out (benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dynaresize.config import BUILTIN_CONFIG_DIR, load_run_config
from dynaresize.executor.batch import BATCHES_DIR, load_batch
from dynaresize.executor.driver import run_live
from dynaresize.executor.job.live_job import resolve_job_paths

CONFIG = "live_cpu_arithmetic"
EDGE_STEPS = 4
"""Steps averaged at the start and at the end of a run to say whether the reward rose."""
BLOCK_STEPS = 10
"""Steps per block of the coarse curve: one step's mean moves a lot with the prompts drawn."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="override the config's steps")
    parser.add_argument("--model", default=None, help="model folder (default: the config's)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    return parser.parse_args()


def run_seed(seed: int, steps: int | None, model: str | None) -> dict:
    overrides: dict = {"live": {"seed": seed, "record_batches": True}}
    if steps is not None:
        overrides["simulation"] = {"num_steps": steps}
        overrides["live"]["num_steps"] = steps
    config = load_run_config(CONFIG, overrides=overrides)
    assert config.live is not None
    live = resolve_job_paths(config.live, BUILTIN_CONFIG_DIR)
    if model is not None:
        live = live.model_copy(
            update={"model": live.model.model_copy(update={"path": Path(model).resolve()})}
        )
    config = config.model_copy(update={"live": live})
    with tempfile.TemporaryDirectory(prefix="arithmetic-reward-") as scratch:
        start = time.perf_counter()
        result = run_live(config, out_dir=Path(scratch) / "run")
        wall_s = time.perf_counter() - start
        rewards = []
        for step in range(result.steps_completed):
            batch = load_batch(result.out_dir / BATCHES_DIR, step)
            rewards.append(float(np.mean([s.reward for s in batch.samples])))
    first, last = np.mean(rewards[:EDGE_STEPS]), np.mean(rewards[-EDGE_STEPS:])
    return {
        "seed": seed,
        "steps": result.steps_completed,
        "samples_per_step": live.prompts_per_step * live.samples_per_prompt,
        "resizes": result.num_resizes,
        "wall_s": round(wall_s, 1),
        "mean_reward_per_step": [round(r, 4) for r in rewards],
        f"mean_reward_first_{EDGE_STEPS}_steps": round(float(first), 4),
        f"mean_reward_last_{EDGE_STEPS}_steps": round(float(last), 4),
        "rose": bool(last > first),
        f"mean_reward_per_{BLOCK_STEPS}_steps": blocks(rewards),
    }


def blocks(rewards: list[float]) -> list[float]:
    """Mean reward of each run of `BLOCK_STEPS` steps (the last block may be shorter)."""
    return [
        round(float(np.mean(rewards[i : i + BLOCK_STEPS])), 4)
        for i in range(0, len(rewards), BLOCK_STEPS)
    ]


def write_markdown(path: Path, runs: list[dict], command: str, samples_per_step: int) -> None:
    lines = [
        "# Mean reward over a `live_cpu_arithmetic` run",
        "",
        f"Command: `{command}`",
        "",
        "Each row is one live run of the built-in config (4 CPU workers, resizes by the "
        "scheduled policy, `final_number` reward with format_score 0.1); the reward is the mean "
        f"over a step's {samples_per_step} samples, averaged over the first and the last "
        f"{EDGE_STEPS} steps.",
        "",
        f"| seed | steps | resizes | wall s | first {EDGE_STEPS} | last {EDGE_STEPS} | rose |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in runs:
        lines.append(
            f"| {run['seed']} | {run['steps']} | {run['resizes']} | {run['wall_s']} | "
            f"{run[f'mean_reward_first_{EDGE_STEPS}_steps']:.3f} | "
            f"{run[f'mean_reward_last_{EDGE_STEPS}_steps']:.3f} | "
            f"{'yes' if run['rose'] else 'no'} |"
        )
    lines += ["", f"Mean reward per {BLOCK_STEPS} steps:", ""]
    for run in runs:
        curve = ", ".join(f"{r:.3f}" for r in run[f"mean_reward_per_{BLOCK_STEPS}_steps"])
        lines.append(f"- seed {run['seed']}: {curve}")
    lines += ["", "Per step (mean reward):", ""]
    for run in runs:
        curve = ", ".join(f"{r:.3f}" for r in run["mean_reward_per_step"])
        lines.append(f"- seed {run['seed']}: {curve}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    args = parse_args()
    command = " ".join(["python", "benchmarks/arithmetic_reward.py", *sys.argv[1:]])
    runs = []
    for seed in args.seeds:
        runs.append(run_seed(seed, args.steps, args.model))
        print(json.dumps(runs[-1]))
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"config": CONFIG, "command": command, "edge_steps": EDGE_STEPS, "runs": runs}
    (args.out / "arithmetic_reward.json").write_text(json.dumps(report, indent=2) + "\n")
    samples_per_step = runs[0]["samples_per_step"] if runs else 0
    write_markdown(args.out / "arithmetic_reward.md", runs, command, samples_per_step)
    print(f"wrote {args.out / 'arithmetic_reward.json'} and arithmetic_reward.md")


if __name__ == "__main__":
    main()
