"""How long imbalances last in a trace, and the controller settings they support.

A resize repays itself only if the imbalance that triggered it lasts past the break-even, so the
advice reads the lengths of runs of consecutive steps imbalanced on one side, and the levels of
imbalance at which moving saves enough, off the measured stage times. Kept apart from the
break-even arithmetic in `breakeven` because these functions need only the stage times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def signed_imbalance(rollout_s: np.ndarray, train_s: np.ndarray) -> np.ndarray:
    """(rollout - train) / max(rollout, train) per step, the same signal the policies use."""
    longer = np.maximum(rollout_s, train_s)
    safe = np.where(longer > 0, longer, 1.0)
    return np.where(longer > 0, (rollout_s - train_s) / safe, 0.0)


@dataclass(frozen=True)
class ImbalanceRuns:
    """Maximal runs of consecutive steps imbalanced beyond a threshold on one side."""

    threshold: float
    rollout_bound_steps: np.ndarray
    """Length (steps) of each run with imbalance > threshold (rollout is the bottleneck)."""
    train_bound_steps: np.ndarray
    """Length (steps) of each run with imbalance < -threshold (training is the bottleneck)."""

    @property
    def all_steps(self) -> np.ndarray:
        return np.concatenate([self.rollout_bound_steps, self.train_bound_steps])


def run_lengths(mask: np.ndarray) -> np.ndarray:
    """Lengths of the maximal runs of True in a boolean series."""
    padded = np.concatenate([[False], np.asarray(mask, bool), [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return (edges[1::2] - edges[::2]).astype(np.int64)


def imbalance_runs(imbalance: np.ndarray, threshold: float) -> ImbalanceRuns:
    return ImbalanceRuns(
        threshold=threshold,
        rollout_bound_steps=run_lengths(imbalance > threshold),
        train_bound_steps=run_lengths(imbalance < -threshold),
    )


def recommended_consecutive_signals(run_steps: np.ndarray, break_even: float) -> int:
    """The k that best separates runs that repay a resize started after k signals from those
    that do not: maximise (runs >= k + break-even) - (runs >= k but shorter than that).

    k never exceeds the longest run: a controller that waits longer than any imbalance the
    trace shows is a controller that never resizes, which the advice says in words instead."""
    if len(run_steps) == 0:
        return 1
    best_k, best_score = 1, -math.inf
    for k in range(1, max(1, min(math.ceil(break_even), int(run_steps.max()))) + 1):
        triggered = run_steps >= k
        repaid = run_steps >= k + break_even
        score = int(repaid.sum()) - int((triggered & ~repaid).sum())
        if score > best_score:
            best_k, best_score = k, score
    return best_k


def recommended_threshold(
    abs_imbalance: np.ndarray, savings_s: np.ndarray, *, cost_s: float, horizon_steps: float
) -> float | None:
    """Smallest |imbalance| above which moving saves, on average, enough per step to repay the
    resize within `horizon_steps`. None when no level does."""
    if len(abs_imbalance) == 0 or horizon_steps <= 0:
        return None
    needed_s = cost_s / horizon_steps
    order = np.argsort(abs_imbalance)[::-1]  # most imbalanced first
    mean_from_top = np.cumsum(savings_s[order]) / np.arange(1, len(order) + 1)
    ok = np.flatnonzero(mean_from_top >= needed_s)
    if len(ok) == 0:
        return None
    return float(abs_imbalance[order][ok[-1]])
