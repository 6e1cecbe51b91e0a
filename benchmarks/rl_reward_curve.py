"""Reward over a short GRPO run of the tiny model on the repeat task, for several seeds.

Each seed is one real live run (`run_live`): two Ray workers, one trainer and one rollout replica,
in sync mode (each batch generated with the weights it trains, one AdamW step per batch), the
seed drawing the model's initial weights, the prompts and the samples. The reward and the
response lengths are read back from the batches the run records. Besides the reward curve it
reports the response lengths of the last steps of each run: the share cut at the length cap and
p99 / p50, which show whether the long tail of the task survives training.

    python3 benchmarks/rl_reward_curve.py                 # 3 seeds on CPU
    python3 benchmarks/rl_reward_curve.py --device cuda --seeds 0 --steps 3

Writes <tag>.json, <tag>.csv, <tag>.md and <tag>.png to --out.
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from dynaresize.executor.batch import BATCHES_DIR, RolloutBatch, load_batch
from dynaresize.executor.config import LiveConfig
from dynaresize.executor.driver import run_live
from dynaresize.traces.io import read_trace


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--samples", type=int, default=8, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--micro-batch", type=int, default=64, help="samples per micro-batch")
    parser.add_argument("--tail-steps", type=int, default=10, help="steps pooled for lengths")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    parser.add_argument("--tag", default="rl_reward")
    parser.add_argument("--out", default="benchmarks/results")
    return parser.parse_args()


def live_config(args: argparse.Namespace, seed: int) -> LiveConfig:
    return LiveConfig.model_validate(
        {
            "model": {"preset": "tiny", "init_seed": seed},
            "device": args.device,
            "num_workers": 2,
            "initial_allocation": "1:1",
            "candidate_allocations": ["1:1"],
            "policy": {"kind": "static"},
            "pipeline": "sync",
            "num_steps": args.steps,
            "prompts_per_step": args.prompts,
            "samples_per_prompt": args.samples,
            "max_response_tokens": args.max_new_tokens,
            "micro_batch_samples": args.micro_batch,
            "optimizer": {"lr": args.learning_rate},
            "torch_threads_per_worker": args.threads,
            "seed": seed,
            "checkpoint_every_steps": None,
            "record_batches": True,
        }
    )


def step_row(seed: int, batch: RolloutBatch, train_s: float) -> dict:
    rewards = np.array([s.reward for s in batch.samples])
    lengths = batch.response_lengths()
    return {
        "seed": seed,
        "step": batch.batch_id,
        "mean_reward": float(rewards.mean()),
        "correct_fraction": float(np.mean(rewards == 1.0)),  # reward 1 exactly when correct
        "mean_response_len": float(lengths.mean()),
        "p50_response_len": float(np.percentile(lengths, 50)),
        "p99_response_len": float(np.percentile(lengths, 99)),
        "cap_fraction": float(np.mean([s.hit_length_cap for s in batch.samples])),
        "rollout_s": batch.rollout_s,
        "train_s": train_s,
    }


def run_seed(args: argparse.Namespace, seed: int) -> tuple[list[dict], dict]:
    """Per-step rows and the pooled length statistics of the last `tail_steps` steps."""
    config = live_config(args, seed)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rl-reward-") as folder:
        out = Path(folder)
        run_live(config, out_dir=out)
        steps = read_trace(out / "trace").steps
        train_s = dict(zip(steps.step.astype(int), steps.train_s, strict=True))
        batches = [load_batch(out / BATCHES_DIR, k) for k in range(config.num_steps)]
    wall_s = time.perf_counter() - start
    rows = [step_row(seed, b, float(train_s[b.batch_id])) for b in batches]
    for row in rows:
        print(
            f"seed {seed} step {row['step']:3d} reward {row['mean_reward']:.3f} "
            f"correct {row['correct_fraction']:.3f} len p50 {row['p50_response_len']:.0f} "
            f"p99 {row['p99_response_len']:.0f} cap {row['cap_fraction']:.3f}",
            flush=True,
        )
    tail = batches[-args.tail_steps :]
    tail_lengths = np.concatenate([b.response_lengths() for b in tail])
    p50, p99 = np.percentile(tail_lengths, [50, 99])
    summary = {
        "seed": seed,
        "num_responses": len(tail_lengths),
        "p50_response_len": float(p50),
        "p99_response_len": float(p99),
        "p99_over_p50": float(p99 / p50),
        "cap_fraction": float(np.mean([s.hit_length_cap for b in tail for s in b.samples])),
        "first_steps_mean_reward": float(np.mean([r["mean_reward"] for r in rows[:5]])),
        "last_steps_mean_reward": float(np.mean([r["mean_reward"] for r in rows[-5:]])),
        "wall_s": wall_s,
    }
    return rows, summary


def main() -> None:
    args = parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    all_rows, tails = [], []
    for seed in args.seeds:
        rows, tail = run_seed(args, seed)
        all_rows += rows
        tails.append(tail)
    record = {
        "config": live_config(args, args.seeds[0]).model_dump(mode="json"),
        "args": vars(args),
        "tails": tails,
        "steps": all_rows,
    }
    (out / f"{args.tag}.json").write_text(json.dumps(record, indent=2) + "\n")
    with open(out / f"{args.tag}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(all_rows[0]))
        writer.writeheader()
        writer.writerows(all_rows)
    (out / f"{args.tag}.md").write_text(markdown(args, tails))
    plot(all_rows, args, out / f"{args.tag}.png")
    print(markdown(args, tails))


def markdown(args: argparse.Namespace, tails: list[dict]) -> str:
    lines = [
        f"# GRPO on the repeat task: tiny model, {args.device.upper()}",
        "",
        f"{args.steps} steps of {args.prompts} prompts x {args.samples} samples, "
        f"max {args.max_new_tokens} new tokens, AdamW lr {args.learning_rate}, one optimizer "
        "step per batch; a live run per seed (one trainer, one rollout replica, sync). "
        f"Lengths pooled over the last {args.tail_steps} steps.",
        "",
        "| seed | reward, first 5 steps | reward, last 5 steps | p50 len | p99 len | p99/p50 "
        "| cut at cap | wall (s) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for t in tails:
        lines.append(
            f"| {t['seed']} | {t['first_steps_mean_reward']:.3f} | "
            f"{t['last_steps_mean_reward']:.3f} | {t['p50_response_len']:.0f} | "
            f"{t['p99_response_len']:.0f} | {t['p99_over_p50']:.1f} | "
            f"{t['cap_fraction']:.1%} | {t['wall_s']:.0f} |"
        )
    lines += [
        "",
        f"Command: `python3 benchmarks/rl_reward_curve.py --steps {args.steps}`",
        "",
    ]
    return "\n".join(lines)


def plot(rows: list[dict], args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (reward_ax, length_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for seed in args.seeds:
        seed_rows = [r for r in rows if r["seed"] == seed]
        steps = [r["step"] for r in seed_rows]
        reward_ax.plot(steps, [r["mean_reward"] for r in seed_rows], label=f"seed {seed}")
        length_ax.plot(steps, [r["p50_response_len"] for r in seed_rows], color="C0", alpha=0.6)
        length_ax.plot(steps, [r["p99_response_len"] for r in seed_rows], color="C3", alpha=0.6)
    reward_ax.set(xlabel="step", ylabel="mean reward", title="Reward")
    reward_ax.legend()
    length_ax.plot([], [], color="C0", label="p50")
    length_ax.plot([], [], color="C3", label="p99")
    length_ax.set(xlabel="step", ylabel="response tokens", title="Response length", yscale="log")
    length_ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
