"""Signals computed from observed stage times, shared by every policy so they agree on meaning."""

from __future__ import annotations

from .types import StageTimes


def imbalance(times: StageTimes) -> float:
    """Signed imbalance in [-1, 1]: (rollout - train) / max(rollout, train).

    Positive means rollout is the bottleneck (move GPUs from Training to Rollout); negative means
    training is. Normalising by the longer stage makes one threshold mean the same share of idle
    time whatever the absolute step time.
    """
    longer = max(times.rollout_s, times.train_s)
    if longer <= 0.0:
        return 0.0
    return (times.rollout_s - times.train_s) / longer
