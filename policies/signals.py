"""Signals computed from observed stage times, shared by every policy so they agree on meaning."""

from __future__ import annotations

from .types import StageTimes


def imbalance(times: StageTimes) -> float:
    """Signed imbalance in [-1, 1]: (rollout - train) / max(rollout, train).

    Positive means rollout is the bottleneck (move GPUs from Training to Rollout); negative means
    training is. Normalising by the longer stage makes one threshold mean the same share of idle
    time whatever the absolute step time.
    """
    rollout_s, train_s = times.rollout_s, times.train_s
    # `max(rollout_s, train_s)` as max takes it (the first unless the second is greater),
    # without the call: a policy reads the imbalance at every step boundary.
    longer = train_s if train_s > rollout_s else rollout_s
    if longer <= 0.0:
        return 0.0
    return (rollout_s - train_s) / longer
