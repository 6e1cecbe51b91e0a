"""Reward over a short GRPO run of the tiny model on the repeat task, for several seeds.

Each seed builds its own model (init seed = run seed), draws its own prompts and trains with the
single-process loop (KV-cache sampler, GRPO). Besides the reward curve it reports the response
lengths of the last steps of each run: the share cut at the length cap and p99 / p50, which show
whether the long tail of the task survives training.

    python3 benchmarks/rl_reward_curve.py                 # 3 seeds on CPU
    python3 benchmarks/rl_reward_curve.py --device cuda --seeds 0 --steps 3

Writes <tag>.json, <tag>.csv, <tag>.md and <tag>.png to --out.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from dynaresize.executor.rl.engine import FinishReason
from dynaresize.executor.rl.grpo import GRPOConfig
from dynaresize.executor.rl.loop import RLConfig, RLLoop, summarise
from dynaresize.executor.rl.model import ModelSpec
from dynaresize.executor.rl.sampler import SamplerConfig
from dynaresize.executor.rl.task import RepeatTaskConfig


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--samples", type=int, default=8, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--minibatches", type=int, default=2)
    parser.add_argument("--tail-steps", type=int, default=10, help="steps pooled for lengths")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--tag", default="rl_reward")
    parser.add_argument("--out", default="benchmarks/results")
    return parser.parse_args()


def make_config(args: argparse.Namespace, seed: int) -> RLConfig:
    return RLConfig(
        model=ModelSpec(init_seed=seed),
        task=RepeatTaskConfig(),
        sampler=SamplerConfig(
            max_batch_size=args.prompts * args.samples, max_seq_len=args.max_new_tokens + 8
        ),
        grpo=GRPOConfig(learning_rate=args.learning_rate),
        max_new_tokens=args.max_new_tokens,
        num_prompts_per_step=args.prompts,
        num_samples_per_prompt=args.samples,
        num_minibatches=args.minibatches,
        num_steps=args.steps,
        seed=seed,
        device=args.device,
    )


def run_seed(args: argparse.Namespace, seed: int) -> tuple[list[dict], dict]:
    """Per-step rows and the pooled length statistics of the last `tail_steps` steps."""
    config = make_config(args, seed)
    loop = RLLoop(config)
    rows, tail_lengths, tail_capped = [], [], []
    start = time.perf_counter()
    for step in range(config.num_steps):
        batch, train = loop.rollout_and_train(step)
        metrics = summarise(batch, train)
        row = {k: v for k, v in asdict(metrics).items() if k != "train"}
        row |= {f"train_{k}": v for k, v in asdict(metrics.train).items()}
        rows.append({"seed": seed, **row})
        if step >= config.num_steps - args.tail_steps:
            tail_lengths += batch.response_lengths().tolist()
            tail_capped += [s.finish_reason == FinishReason.LENGTH for s in batch.samples]
        print(
            f"seed {seed} step {step:3d} reward {metrics.mean_reward:.3f} "
            f"correct {metrics.correct_fraction:.3f} len p50 {metrics.p50_response_len:.0f} "
            f"p99 {metrics.p99_response_len:.0f} cap {metrics.cap_fraction:.3f} "
            f"t {time.perf_counter() - start:.0f}s",
            flush=True,
        )
    p50, p99 = np.percentile(tail_lengths, [50, 99])
    tail = {
        "seed": seed,
        "num_responses": len(tail_lengths),
        "p50_response_len": float(p50),
        "p99_response_len": float(p99),
        "p99_over_p50": float(p99 / p50),
        "cap_fraction": float(np.mean(tail_capped)),
        "first_steps_mean_reward": float(np.mean([r["mean_reward"] for r in rows[:5]])),
        "last_steps_mean_reward": float(np.mean([r["mean_reward"] for r in rows[-5:]])),
        "wall_s": time.perf_counter() - start,
    }
    return rows, tail


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    all_rows, tails = [], []
    for seed in args.seeds:
        rows, tail = run_seed(args, seed)
        all_rows += rows
        tails.append(tail)
    record = {
        "config": make_config(args, args.seeds[0]).model_dump(mode="json"),
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
        "# GRPO on the repeat task: tiny model, CPU",
        "",
        f"{args.steps} steps of {args.prompts} prompts x {args.samples} samples, "
        f"max {args.max_new_tokens} new tokens, AdamW lr {args.learning_rate}, "
        f"{args.minibatches} optimizer steps per batch. Lengths pooled over the last "
        f"{args.tail_steps} steps.",
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
