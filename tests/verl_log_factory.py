"""veRL file-logger lines written from veRL's documented metric names (facts.md, veRL's trainers),
for the importer, replay and break-even tests. Not a test module itself."""

from __future__ import annotations

import json

import numpy as np

PROMPT, RESPONSE, SAMPLES, GPUS = 200.0, 600.0, 64, 8
TOKENS = int(SAMPLES * (PROMPT + RESPONSE))


def batch_keys(
    step_s: float, gpus: int = GPUS, *, response: float = RESPONSE, samples: int = SAMPLES
) -> dict:
    tokens = int(samples * (PROMPT + response))
    return {
        "response_length/mean": response,
        "response_length/max": 4 * response,
        "prompt_length/mean": PROMPT,
        "perf/total_num_tokens": tokens,
        "perf/time_per_step": step_s,
        "perf/throughput": tokens / (step_s * gpus),
    }


def write_log(path, lines: list) -> None:
    with open(path, "w") as f:
        for obj in lines:
            f.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")


def colocated_line(step: int, gen: float, update: float, train: float, **extra) -> dict:
    inside = sum(v for k, v in extra.items() if k.startswith("timing_s/"))
    step_s = gen + update + train + inside
    data = {
        "timing_s/gen": gen,
        "timing_s/update_weights": update,
        "timing_s/update_actor": train,
        "timing_s/step": step_s,
        **batch_keys(step_s),
        **extra,
    }
    return {"step": step, "data": data}


def one_step_off_line(step: int, wait: float, sync: float, train: float, **extra) -> dict:
    step_s = wait + sync + train
    data = {
        "timing_s/gen": wait,
        "timing_s/generate_async": 30.0,
        "timing_s/sync_rollout_weights": sync,
        "timing_s/update_actor": train,
        "timing_s/step": step_s,
        **batch_keys(step_s),
        **extra,
    }
    return {"step": step, "data": data}


def one_step_off_run(num_steps: int, *, seed: int = 0, gpus: int = GPUS) -> list[dict]:
    """A one-step-off run whose responses grow longer: generation (on the rollout GPUs) slows
    from about the training time to well above it, so the trainer waits more and more."""
    rng = np.random.default_rng(seed)
    lines = []
    previous_train = 20.0
    for k in range(1, num_steps + 1):
        response = 500.0 + 700.0 * (k - 1) / max(num_steps - 1, 1) + rng.normal(0, 20)
        tokens = SAMPLES * (PROMPT + response)
        generate = 2.0 + 0.03 * response + rng.normal(0, 0.3)
        train = 4.0 + tokens * 2.0e-4 + rng.normal(0, 0.2)
        wait = max(0.0, generate - previous_train)
        sync = 5.0 + rng.normal(0, 0.05)
        step_s = wait + sync + train
        data = {
            "timing_s/gen": wait,
            "timing_s/generate_async": generate,
            "timing_s/sync_rollout_weights": sync,
            "timing_s/update_actor": train - 1.0,
            "timing_s/old_log_prob": 1.0,
            "timing_s/step": step_s,
            **batch_keys(step_s, gpus, response=response),
        }
        lines.append({"step": k, "data": data})
        previous_train = train
    return lines


def colocated_run(num_steps: int, *, seed: int = 0, gpus: int = GPUS) -> list[dict]:
    """A colocated run with the same growing responses: generation, then training, on all GPUs."""
    rng = np.random.default_rng(seed)
    lines = []
    for k in range(1, num_steps + 1):
        response = 500.0 + 700.0 * (k - 1) / max(num_steps - 1, 1) + rng.normal(0, 20)
        tokens = SAMPLES * (PROMPT + response)
        gen = 1.0 + 0.012 * response + rng.normal(0, 0.2)
        train = 2.0 + tokens * 1.0e-4 + rng.normal(0, 0.1)
        update = 1.0
        step_s = gen + update + train
        data = {
            "timing_s/gen": gen,
            "timing_s/update_weights": update,
            "timing_s/update_actor": train,
            "timing_s/step": step_s,
            **batch_keys(step_s, gpus, response=response),
        }
        lines.append({"step": k, "data": data})
    return lines


def separate_async_lines() -> list[dict]:
    """Six steps; the controller lends the trainer GPUs after steps 1, 3 and 4 (verl numbering)
    and reclaims them at the start of the step after each."""
    lend = {1: 9.0, 3: 9.5, 4: 8.5}
    reclaim = {2: 3.0, 4: 3.5, 5: 2.5}
    lines = []
    for k in range(1, 7):
        parts = {
            "timing_s/gen": 1.0,
            "timing_s/update_weights": 2.0,
            "timing_s/update_actor": 20.0,
        }
        if k in reclaim:
            parts["timing_s/switch_wait"] = 4.0
            parts["timing_s/switch_to_trainer"] = reclaim[k]
        if k in lend:
            parts["timing_s/switch_to_rollout"] = lend[k]
        step_s = sum(parts.values())
        data = {
            **parts,
            "timing_s/step": step_s,
            "separate_async/decision/should_switch_to_rollout": float(k in lend),
            **batch_keys(step_s),
        }
        lines.append({"step": k, "data": data})
    return lines
