"""`hpa`: a Kubernetes Horizontal-Pod-Autoscaler-style rule, with HPA's parameter names.

Rollout plays the scaled workload, its GPUs the replicas; Training gets the rest. The metric is
the last step's `rollout_s / train_s` against `target_rollout_to_train_ratio`. What HPA does,
per sync period (here: per step boundary):

1. desired = ceil(current rollout GPUs * metric / target), unless |metric / target - 1| is
   within `tolerance` (then desired = current);
2. stabilization: the raw recommendation is remembered; scaling up goes only as far as the
   lowest recommendation of the last `scale_up_stabilization_window_steps`, scaling down only as
   far as the highest of the last `scale_down_stabilization_window_steps`;
3. rate limits per direction: each policy allows a change of `value` GPUs (`type: gpus`, HPA's
   `Pods`) or `value` percent (`type: percent`) relative to the GPU count at the start of its
   `period_steps`; `select_policy` Max takes the policy allowing the most change, Min the least,
   Disabled forbids scaling that way;
4. bounds: the smallest and largest rollout share among the candidates.

Candidates are discrete, so the limited recommendation is met by the candidate farthest from
the current allocation that does not go past it; if none does, the policy holds. HPA's seconds
become steps: its 15 s sync period is one step boundary, and the default scale-down window of
300 s is 8 steps of the paper's roughly 40 s.
"""

from __future__ import annotations

import math
from collections import deque
from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import PolicyConfigBase
from .types import Allocation, Decision, StepObservation


class ScalingPolicyType(str, Enum):
    """HPA's policy types; `gpus` is HPA's `Pods`."""

    GPUS = "gpus"
    PERCENT = "percent"


class SelectPolicy(str, Enum):
    """HPA's `selectPolicy`."""

    MAX = "Max"
    MIN = "Min"
    DISABLED = "Disabled"


class ScalingPolicy(BaseModel):
    """One HPA `HPAScalingPolicy`: at most `value` change per `period_steps`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: ScalingPolicyType = Field(description="gpus: absolute GPUs; percent: share of count.")
    value: int = Field(gt=0, description="Allowed change per period (GPUs or percent).")
    period_steps: int = Field(default=1, ge=1, description="Length of the period in steps.")


def _default_scale_up() -> tuple[ScalingPolicy, ...]:
    return (
        ScalingPolicy(type=ScalingPolicyType.PERCENT, value=100, period_steps=1),
        ScalingPolicy(type=ScalingPolicyType.GPUS, value=4, period_steps=1),
    )


def _default_scale_down() -> tuple[ScalingPolicy, ...]:
    return (ScalingPolicy(type=ScalingPolicyType.PERCENT, value=100, period_steps=1),)


class HpaConfig(PolicyConfigBase):
    """HPA `behavior` for the Rollout role, in steps instead of seconds."""

    kind: Literal["hpa"] = Field(default="hpa", description="Selects the HPA-style policy.")
    target_rollout_to_train_ratio: float = Field(
        default=1.0, gt=0.0, description="Metric target: rollout_s / train_s at balance."
    )
    tolerance: float = Field(
        default=0.1,
        ge=0.0,
        lt=1.0,
        description="Hold while |metric / target - 1| is at most this (HPA default 0.1).",
    )
    scale_up_stabilization_window_steps: int = Field(
        default=0, ge=0, description="Steps of recommendations a scale-up must agree with."
    )
    scale_down_stabilization_window_steps: int = Field(
        default=8, ge=0, description="Steps of recommendations a scale-down must agree with."
    )
    scale_up_policies: tuple[ScalingPolicy, ...] = Field(
        default_factory=_default_scale_up,
        min_length=1,
        description="Rate limits for adding rollout GPUs (HPA default: 100 % or 4 per period).",
    )
    scale_up_select_policy: SelectPolicy = Field(
        default=SelectPolicy.MAX, description="Max, Min or Disabled, as HPA's selectPolicy."
    )
    scale_down_policies: tuple[ScalingPolicy, ...] = Field(
        default_factory=_default_scale_down,
        min_length=1,
        description="Rate limits for removing rollout GPUs (HPA default: 100 % per period).",
    )
    scale_down_select_policy: SelectPolicy = Field(
        default=SelectPolicy.MAX, description="Max, Min or Disabled, as HPA's selectPolicy."
    )

    def build(self) -> HpaPolicy:
        return HpaPolicy(self)


def raw_recommendation(current_gpus: int, *, metric: float, target: float, tolerance: float) -> int:
    """HPA's replica formula with its tolerance band."""
    usage_ratio = metric / target
    if abs(usage_ratio - 1.0) <= tolerance:
        return current_gpus
    return math.ceil(current_gpus * usage_ratio)


def _gpus_at_period_start(
    current: int, events: deque[tuple[int, int]], *, step: int, period_steps: int
) -> int:
    """Rollout GPUs before the resizes within the last `period_steps` boundaries."""
    return current - sum(d for s, d in events if s > step - period_steps)


def _rate_limit(
    current: int,
    events: deque[tuple[int, int]],
    *,
    step: int,
    config: HpaConfig,
    grow: bool,
) -> int:
    """Farthest rollout GPU count one direction's policies allow now (HPA's rate limits).

    Each policy allows `value` GPUs or `value` percent (rounded away from `current`) beyond the
    count at the start of its period; Max takes the policy allowing the most change, Min the
    least, Disabled allows none.
    """
    if grow:
        policies, select = config.scale_up_policies, config.scale_up_select_policy
    else:
        policies, select = config.scale_down_policies, config.scale_down_select_policy
    if select is SelectPolicy.DISABLED:
        return current
    sign = 1 if grow else -1
    round_outwards = math.ceil if grow else math.floor
    proposals = []
    for policy in policies:
        start = _gpus_at_period_start(current, events, step=step, period_steps=policy.period_steps)
        if policy.type is ScalingPolicyType.GPUS:
            proposals.append(start + sign * policy.value)
        else:
            proposals.append(round_outwards(start * (1.0 + sign * policy.value / 100.0)))
    most_change, least_change = (max, min) if grow else (min, max)
    return most_change(proposals) if select is SelectPolicy.MAX else least_change(proposals)


class HpaPolicy:
    """State: past raw recommendations and past resizes (for windows and per-period limits)."""

    def __init__(self, config: HpaConfig) -> None:
        self.config = config
        self.reset()

    def reset(self) -> None:
        self._recommendations: deque[tuple[int, int]] = deque()
        self._events: deque[tuple[int, int]] = deque()

    def _forget_before(self, step: int) -> None:
        cfg = self.config
        keep_recs = max(
            cfg.scale_up_stabilization_window_steps, cfg.scale_down_stabilization_window_steps
        )
        while self._recommendations and self._recommendations[0][0] <= step - keep_recs:
            self._recommendations.popleft()
        longest = max(p.period_steps for p in (*cfg.scale_up_policies, *cfg.scale_down_policies))
        while self._events and self._events[0][0] <= step - longest:
            self._events.popleft()

    def _stabilize(self, current: int, raw: int, step: int) -> int:
        cfg = self.config
        up, down = raw, raw
        for rec_step, rec in self._recommendations:
            if rec_step > step - cfg.scale_up_stabilization_window_steps:
                up = min(up, rec)
            if rec_step > step - cfg.scale_down_stabilization_window_steps:
                down = max(down, rec)
        stabilized = current
        if stabilized < up:
            stabilized = up
        if stabilized > down:
            stabilized = down
        return stabilized

    def recommend(self, obs: StepObservation) -> int:
        """The rollout GPU count HPA would ask for now, before meeting the candidates."""
        cfg = self.config
        current = obs.allocation.rollout_gpus
        train_s = obs.last.train_s
        shares = [a.rollout_gpus for a in obs.candidate_allocations()]
        if train_s > 0:
            raw = raw_recommendation(
                current,
                metric=obs.last.rollout_s / train_s,
                target=cfg.target_rollout_to_train_ratio,
                tolerance=cfg.tolerance,
            )
        else:  # no training time measured: an unbounded metric asks for the most rollout GPUs
            raw = current if obs.last.rollout_s <= 0 else max(shares)
        self._forget_before(obs.step)
        stabilized = self._stabilize(current, raw, obs.step)
        self._recommendations.append((obs.step, raw))
        if stabilized != current:
            grow = stabilized > current
            limit = _rate_limit(current, self._events, step=obs.step, config=cfg, grow=grow)
            stabilized = min(stabilized, limit) if grow else max(stabilized, limit)
        return min(max(stabilized, min(shares)), max(shares))

    def decide(self, obs: StepObservation) -> Decision:
        current = obs.allocation.rollout_gpus
        wanted = self.recommend(obs)
        if wanted == current:
            return Decision.hold(f"recommendation {wanted} rollout GPUs = current")
        target = _farthest_candidate_not_past(obs, wanted)
        if target is None:
            return Decision.hold(f"recommendation {wanted} rollout GPUs: no candidate within it")
        self._events.append((obs.step, target.rollout_gpus - current))
        return Decision.resize(target, f"HPA recommendation {wanted} rollout GPUs")


def _farthest_candidate_not_past(obs: StepObservation, wanted: int) -> Allocation | None:
    current = obs.allocation.rollout_gpus
    low, high = sorted((current, wanted))
    eligible = [
        a
        for a in obs.candidate_allocations()
        if low <= a.rollout_gpus <= high and a.rollout_gpus != current
    ]
    if not eligible:
        return None
    return max(eligible, key=lambda a: abs(a.rollout_gpus - current))
