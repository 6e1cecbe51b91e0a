"""From a trace's tables to a `Workload`: recorded per-sample lengths where they exist, and a
stated, deterministic reconstruction from per-step statistics where they do not.

Most logs users have (verl, slime, experiment trackers) carry only per-step statistics: the
number of samples, total tokens, and the mean and longest response. A replay needs one length
per sample, so for such steps the response lengths are the evenly spaced quantiles of a
lognormal whose mean is the recorded mean and whose top quantile (1 - 1/(2n)) is the recorded
maximum; the long tail that drives rollout time is kept, nothing is random, and the notes say so.

The other way, `workload_samples` turns a `Workload` into the samples table of a trace (what the
twin writes beside its step records).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

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
    from scipy.special import ndtri  # here: SciPy takes longer to import than most commands

    z = float(ndtri(1.0 - 0.5 / num_samples))
    gap = np.log(longest / mean)
    sigma = z - np.sqrt(z * z - 2.0 * gap) if z * z >= 2.0 * gap else z
    mu = np.log(mean) - sigma * sigma / 2.0
    quantiles = (np.arange(num_samples) + 0.5) / num_samples
    lengths = np.exp(mu + sigma * ndtri(quantiles))
    lengths *= mean / lengths.mean()  # the quantile grid slightly misses the mean; restore it
    return np.clip(np.rint(lengths), 0, longest).astype(np.int64)


def infer_workload(steps: pd.DataFrame, samples: pd.DataFrame, *, name: str) -> InferredWorkload:
    """Per-step prompt and response lengths, in the order of the steps table.

    Steps without sample records are synthesized in blocks of equal sample count (one matrix
    per block of at most `_ROWS_PER_BLOCK` steps), so a trace of hundreds of thousands of steps
    takes a fraction of a second in bounded memory.
    """
    by_step: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if len(samples):
        ordered = samples.sort_values(["step", "sample_index"], kind="stable")
        for step, group in ordered.groupby("step", sort=False):
            by_step[int(step)] = (
                group["prompt_tokens"].to_numpy(np.int64),
                group["response_tokens"].to_numpy(np.int64),
            )
    step_ids = steps["step"].to_numpy(np.int64)
    missing = np.array([int(k) not in by_step for k in step_ids], dtype=bool)
    synthesized = step_ids[missing]
    made = _lognormal_steps(
        steps["num_samples"].to_numpy(np.int64)[missing],
        steps["response_len_mean"].to_numpy(np.float64)[missing],
        steps["response_len_max"].to_numpy(np.float64)[missing],
        steps["tokens"].to_numpy(np.int64)[missing],
    )
    made_iter = iter(made)
    prompts, responses = [], []
    for k, is_missing in zip(step_ids, missing, strict=True):
        prompt, response = next(made_iter) if is_missing else by_step[int(k)]
        prompts.append(prompt)
        responses.append(response)
    notes = _notes([int(k) for k in synthesized], len(steps)) + _empty_step_notes(steps)
    return InferredWorkload(Workload.from_steps(prompts, responses, name=name), notes)


_ROWS_PER_BLOCK = 4096
"""Steps whose lengths are made in one array (bounds the memory of a long trace)."""


def _lognormal_steps(
    num_samples: np.ndarray, mean: np.ndarray, longest: np.ndarray, tokens: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray]]:
    """`lognormal_lengths` of many steps at once, and each step's prompt lengths: steps of one
    batch size share the quantile grid, so a block of them is one array expression."""
    out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(num_samples)
    for n in np.unique(num_samples):
        rows = np.flatnonzero(num_samples == n)
        n = int(n)
        spread = (mean[rows] > 0) & (longest[rows] > mean[rows]) & (n > 1)
        for start in range(0, len(rows), _ROWS_PER_BLOCK):
            block = rows[start : start + _ROWS_PER_BLOCK]
            lengths = _block_lengths(
                n, mean[block], longest[block], spread[start : start + len(block)]
            )
            for i, row in enumerate(block):
                resp = lengths[i]
                prompt_each = max(0, round((int(tokens[row]) - int(resp.sum())) / n)) if n else 0
                out[row] = (np.full(n, prompt_each, np.int64), resp)
    return [item for item in out if item is not None]


def _block_lengths(n: int, mean: np.ndarray, longest: np.ndarray, spread: np.ndarray) -> np.ndarray:
    """(steps, n) response lengths, row by row as `lognormal_lengths` makes them."""
    if n <= 0:
        return np.zeros((len(mean), 0), np.int64)
    from scipy.special import ndtri  # here: SciPy takes longer to import than most commands

    flat = np.rint(np.repeat(mean[:, None], n, axis=1)).astype(np.int64)
    if not spread.any():
        return flat
    z = float(ndtri(1.0 - 0.5 / n))
    gap = np.log(longest[spread] / mean[spread])
    root = z * z - 2.0 * gap
    sigma = np.where(root >= 0, z - np.sqrt(np.clip(root, 0, None)), z)
    mu = np.log(mean[spread]) - sigma * sigma / 2.0
    grid = ndtri((np.arange(n) + 0.5) / n)
    lengths = np.exp(mu[:, None] + sigma[:, None] * grid[None, :])
    lengths *= (mean[spread] / lengths.mean(axis=1))[:, None]
    flat[spread] = np.clip(np.rint(lengths), 0, longest[spread][:, None]).astype(np.int64)
    return flat


def inference_notes(steps: pd.DataFrame, samples: pd.DataFrame) -> list[str]:
    """What `infer_workload` would synthesize, without building the workload."""
    recorded = set(np.unique(samples["step"].to_numpy(np.int64))) if len(samples) else set()
    missing = [int(s) for s in steps["step"].to_numpy(np.int64) if int(s) not in recorded]
    return _notes(missing, len(steps)) + _empty_step_notes(steps)


def _empty_step_notes(steps: pd.DataFrame) -> list[str]:
    """Steps that record no tokens or no samples: replayed as steps without generation or
    training work, which a user should know rather than find out from the figures."""
    if len(steps) == 0:
        return []
    empty = (steps["tokens"].to_numpy(np.int64) == 0) | (
        steps["num_samples"].to_numpy(np.int64) == 0
    )
    if not empty.any():
        return []
    first = int(steps["step"].to_numpy(np.int64)[np.flatnonzero(empty)[0]])
    return [
        f"{int(empty.sum())} of {len(steps)} steps record 0 tokens or 0 samples (first: step "
        f"{first}); they are replayed with no samples to generate or train on"
    ]


def _notes(synthesized: list[int], num_steps: int) -> list[str]:
    if not synthesized:
        return []
    return [
        f"{len(synthesized)} of {num_steps} steps have no per-sample lengths "
        f"(first: step {synthesized[0]}); their response lengths are quantiles of a "
        "lognormal matching the recorded mean and max response length, and every prompt "
        "gets (tokens - response tokens) / num_samples"
    ]


def workload_samples(workload: Workload) -> pd.DataFrame:
    """A trace's samples table for a workload, the inverse of `infer_workload` on recorded
    samples (and of the twin's `trace_workload`).

    For traces the twin writes: the token counts and each sample's place in its step; replica,
    device and finish time are unknown to the twin and left empty.
    """
    step = workload.step_index()
    num_samples = len(step)

    # The unknown columns typed and empty (a mask, NaN), not a Python None per sample: a
    # workload of 10^8 samples would otherwise hold three 800 MB columns of pointers.
    def unknown_ints() -> pd.arrays.IntegerArray:
        return pd.arrays.IntegerArray(np.zeros(num_samples, np.int64), np.ones(num_samples, bool))

    return pd.DataFrame(
        {
            "schema_version": 1,
            "step": step,
            "sample_index": np.arange(num_samples) - workload.step_offsets[step],
            "prompt_tokens": workload.prompt_tokens,
            "response_tokens": workload.response_tokens,
            "rollout_replica": unknown_ints(),
            "device": unknown_ints(),
            "finish_s": np.full(num_samples, np.nan),
        }
    )
