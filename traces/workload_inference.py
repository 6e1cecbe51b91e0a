"""From a trace's tables to a `Workload`: recorded per-sample lengths where they exist, and a
stated, deterministic reconstruction from per-step statistics where they do not.

Most logs users have (verl, slime, experiment trackers) carry only per-step statistics: the
number of samples, total tokens, and the mean and longest response. A replay needs one length
per sample, so for such steps the response lengths are the evenly spaced quantiles of a
lognormal whose mean is the recorded mean and whose top quantile (1 - 1/(2n)) is the recorded
maximum; the long tail that drives rollout time is kept, nothing is random, and the notes say so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import ndtri

from .workload import Workload


@dataclass(frozen=True)
class InferredWorkload:
    workload: Workload
    notes: list[str]
    """What was synthesized rather than recorded; empty when every step had sample records."""


def lognormal_lengths(*, num_samples: int, mean: float, longest: float) -> np.ndarray:
    """`num_samples` response lengths whose mean is `mean` and whose maximum is near `longest`.

    Lognormal with mean m and the (1 - 1/(2n)) quantile at `longest`: with z that normal
    quantile, ln(longest / m) = z*sigma - sigma^2/2, whose smaller root is sigma. Falls back to
    equal lengths when the statistics admit no spread (longest <= mean, or zero mean).
    """
    if num_samples <= 0:
        return np.zeros(0, np.int64)
    if mean <= 0 or longest <= mean or num_samples == 1:
        return np.full(num_samples, round(mean), np.int64)
    z = float(ndtri(1.0 - 0.5 / num_samples))
    gap = np.log(longest / mean)
    sigma = z - np.sqrt(z * z - 2.0 * gap) if z * z >= 2.0 * gap else z
    mu = np.log(mean) - sigma * sigma / 2.0
    quantiles = (np.arange(num_samples) + 0.5) / num_samples
    lengths = np.exp(mu + sigma * ndtri(quantiles))
    lengths *= mean / lengths.mean()  # the quantile grid slightly misses the mean; restore it
    return np.clip(np.rint(lengths), 0, longest).astype(np.int64)


def infer_workload(steps: pd.DataFrame, samples: pd.DataFrame, *, name: str) -> InferredWorkload:
    """Per-step prompt and response lengths, in the order of the steps table."""
    by_step = {}
    if len(samples):
        ordered = samples.sort_values(["step", "sample_index"], kind="stable")
        for step, group in ordered.groupby("step", sort=False):
            by_step[int(step)] = (
                group["prompt_tokens"].to_numpy(np.int64),
                group["response_tokens"].to_numpy(np.int64),
            )
    prompts, responses, synthesized = [], [], []
    for row in steps.itertuples(index=False):
        recorded = by_step.get(int(row.step))
        if recorded is not None:
            prompts.append(recorded[0])
            responses.append(recorded[1])
            continue
        synthesized.append(int(row.step))
        n = int(row.num_samples)
        resp = lognormal_lengths(
            num_samples=n, mean=float(row.response_len_mean), longest=float(row.response_len_max)
        )
        prompt_each = max(0, round((int(row.tokens) - int(resp.sum())) / n)) if n else 0
        prompts.append(np.full(n, prompt_each, np.int64))
        responses.append(resp)
    notes = _notes(synthesized, len(steps))
    return InferredWorkload(Workload.from_steps(prompts, responses, name=name), notes)


def inference_notes(steps: pd.DataFrame, samples: pd.DataFrame) -> list[str]:
    """What `infer_workload` would synthesize, without building the workload."""
    recorded = set(np.unique(samples["step"].to_numpy(np.int64))) if len(samples) else set()
    missing = [int(s) for s in steps["step"].to_numpy(np.int64) if int(s) not in recorded]
    return _notes(missing, len(steps))


def _notes(synthesized: list[int], num_steps: int) -> list[str]:
    if not synthesized:
        return []
    return [
        f"{len(synthesized)} of {num_steps} steps have no per-sample lengths "
        f"(first: step {synthesized[0]}); their response lengths are quantiles of a "
        "lognormal matching the recorded mean and max response length, and every prompt "
        "gets (tokens - response tokens) / num_samples"
    ]
