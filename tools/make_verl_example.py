"""Write the small example verl file-logger traces shipped in dynaresize/data/.

The files use only the metric names verl's trainers write (docs/importers.md) with the meaning
each has in its mode, so the importer sees what it would see from a real run. The numbers come
from a simple seeded model of a run, not from a measurement:
- responses: a lognormal body plus a rare long tail, clipped at the max response length;
- rollout time: a fixed cost plus decode time set by the longest response (the straggler) plus a
  throughput term over the rollout GPUs;
- training time: a fixed cost plus time per token over the training GPUs;
- one-step-off: generation of batch k+1 overlaps training on batch k; the trainer waits only for
  what is left (`timing_s/gen`) and the generation's own time is `timing_s/generate_async`.

    python tools/make_verl_example.py            # rewrites both files
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

DATA_DIR = Path(__file__).resolve().parents[1] / "dynaresize" / "data"
MAX_RESPONSE_TOKENS = 8192
PROMPTS_PER_STEP, SAMPLES_PER_PROMPT = 32, 8
NUM_GPUS, TRAIN_GPUS = 8, 6


def draw_batch(rng: np.random.Generator, step: int, num_steps: int) -> tuple[np.ndarray, ...]:
    n = PROMPTS_PER_STEP * SAMPLES_PER_PROMPT
    prompts = rng.integers(120, 700, n)
    drift = 1.0 + 0.6 * step / num_steps  # reasoning grows longer as training goes on
    body = rng.lognormal(np.log(650 * drift), 0.6, n)
    tail = rng.random(n) < 0.03
    body[tail] = rng.uniform(4000, 9000, tail.sum())
    responses = np.minimum(np.rint(body), MAX_RESPONSE_TOKENS).astype(int)
    return prompts, responses


def rollout_seconds(responses: np.ndarray, rollout_gpus: int, rng) -> float:
    straggler_s = responses.max() * 0.0007  # decode of the longest response at batch 1
    throughput_s = responses.sum() / (4900.0 * rollout_gpus)
    return float(1.5 + straggler_s + throughput_s + rng.normal(0, 0.3))


def train_parts(tokens: int, train_gpus: int, rng) -> dict[str, float]:
    per_gpu = tokens / train_gpus
    return {
        "old_log_prob": 0.4 + per_gpu / 25000.0,
        "ref": 0.4 + per_gpu / 28000.0,
        "adv": 0.05 + rng.uniform(0, 0.02),
        "reward": 0.3 + rng.uniform(0, 0.1),
        "update_actor": 1.2 + per_gpu / 3800.0 + rng.normal(0, 0.1),
    }


def data_metrics(prompts, responses, rng) -> dict[str, float]:
    return {
        "response_length/mean": float(responses.mean()),
        "response_length/max": float(responses.max()),
        "response_length/min": float(responses.min()),
        "response_length/clip_ratio": float((responses == MAX_RESPONSE_TOKENS).mean()),
        "prompt_length/mean": float(prompts.mean()),
        "prompt_length/max": float(prompts.max()),
        "prompt_length/min": float(prompts.min()),
        "actor/entropy": float(rng.uniform(0.3, 0.6)),
        "critic/score/mean": float(rng.uniform(0.2, 0.7)),
    }


def perf(tokens: int, step_s: float, num_gpus: int) -> dict[str, float]:
    return {
        "perf/total_num_tokens": tokens,
        "perf/time_per_step": step_s,
        "perf/throughput": tokens / (step_s * num_gpus),
    }


def one_step_off_lines(num_steps: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rollout_gpus = NUM_GPUS - TRAIN_GPUS
    batches = [draw_batch(rng, k, num_steps) for k in range(num_steps)]
    gen = [rollout_seconds(r, rollout_gpus, rng) for _, r in batches]
    lines = [{"step": 0, "data": {"val-core/math/acc/mean@1": 0.31}}]
    prev_train_s = 0.0  # the first batch is generated while nothing trains
    for k, (prompts, responses) in enumerate(batches):
        tokens = int(prompts.sum() + responses.sum())
        wait_s = max(0.0, gen[k] - prev_train_s) + 0.02
        sync_s = 5.6 + rng.normal(0, 0.15)  # NCCL broadcast of a 7B model, plus KV-cache reset
        parts = train_parts(tokens, TRAIN_GPUS, rng)
        train_s = sum(parts.values()) + 0.1
        step_s = wait_s + sync_s + train_s
        timing = {"gen": wait_s, "generate_async": gen[k], "sync_rollout_weights": sync_s}
        timing.update(parts)
        timing["step"] = step_s
        data = {f"timing_s/{name}": value for name, value in timing.items()}
        data.update(data_metrics(prompts, responses, rng))
        data.update(perf(tokens, step_s, NUM_GPUS))
        data["training/global_step"] = k + 1
        lines.append({"step": k + 1, "data": data})
        prev_train_s = train_s
    return lines


def colocated_lines(num_steps: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    lines = []
    for k in range(num_steps):
        prompts, responses = draw_batch(rng, k, num_steps)
        tokens = int(prompts.sum() + responses.sum())
        gen_s = rollout_seconds(responses, NUM_GPUS, rng) + 2.0  # plus engine wake-up and sleep
        update_weights_s = 1.1 + rng.normal(0, 0.05)
        parts = train_parts(tokens, NUM_GPUS, rng)
        step_s = gen_s + update_weights_s + sum(parts.values()) + 0.1
        timing = {"gen": gen_s, **parts, "update_weights": update_weights_s, "step": step_s}
        data = {f"timing_s/{name}": value for name, value in timing.items()}
        data.update(data_metrics(prompts, responses, rng))
        data.update(perf(tokens, step_s, NUM_GPUS))
        lines.append({"step": k + 1, "data": data})
    return lines


def write_jsonl(path: Path, lines: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for obj in lines:
            f.write(json.dumps(obj, separators=(",", ":")) + "\n")


RUN_FACTS = {
    "model_name": "7B-class model (synthetic example)",
    "model_params_b": 7.6,
    "cluster": "1 node, 8 GPUs (synthetic example)",
}
"""What the logs cannot say, written beside them as `<log>.import.json` for the importer."""


def write_sidecar(log: Path, facts: dict) -> None:
    sidecar = log.with_name(log.name + ".import.json")
    sidecar.write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")


def main() -> None:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    one_step_off = DATA_DIR / "verl_one_step_off_example.jsonl"
    colocated = DATA_DIR / "verl_colocated_example.jsonl"
    write_jsonl(one_step_off, one_step_off_lines(60, seed=7))
    write_jsonl(colocated, colocated_lines(30, seed=11))
    rollout_gpus = NUM_GPUS - TRAIN_GPUS
    write_sidecar(
        one_step_off, {"train_gpus": TRAIN_GPUS, "rollout_gpus": rollout_gpus, **RUN_FACTS}
    )
    write_sidecar(colocated, {"num_gpus": NUM_GPUS, **RUN_FACTS})
    print(f"wrote {one_step_off} and {colocated}, each with its .import.json")


if __name__ == "__main__":
    main()
