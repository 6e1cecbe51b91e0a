"""`payback`: admit a resize only when its predicted saving repays its predicted cost.

After Nereus, which admits a transition only when the time it saves pays back the transition
cost. For every candidate the caller predicts the steady-state step time and the resize cost
(critical path plus the slowdown of the first step after it); the policy moves to the candidate
with the largest net gain over a horizon, and only if

    (predicted_step_s[current] - predicted_step_s[candidate]) * horizon_steps
        >= predicted_resize_total_s[candidate] * margin

with `margin >= 1`, so it never admits a resize whose predicted saving is below its cost. The
horizon shrinks to the steps left in the run when the caller knows them: a resize near the end
has no time to pay back.

Where the pipeline offers lending the trainers' GPUs within a step, the same admission decides
it (`lend`): lend when the predicted wait saved, counted before the switch costs, is at least
`margin` times the predicted activate plus deactivate.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import PolicyConfigBase
from .types import Allocation, CandidatePrediction, Decision, LendAction, StepObservation


class PaybackConfig(PolicyConfigBase):
    """Cost-aware admission: predicted saving over a horizon versus predicted resize cost."""

    kind: Literal["payback"] = Field(
        default="payback", description="Selects the payback (Nereus-style) policy."
    )
    horizon_steps: int = Field(
        default=50,
        ge=1,
        description="Steps over which a resize must pay back its cost.",
    )
    margin: float = Field(
        default=1.2,
        ge=1.0,
        description="Required ratio of predicted saving to predicted cost (>= 1: never admit a "
        "resize that does not at least repay itself).",
    )
    cap_horizon_at_remaining_steps: bool = Field(
        default=True,
        description="Shorten the horizon to the steps left in the run when the caller knows them.",
    )
    lend: bool = Field(
        default=True,
        description="Where the pipeline can lend the trainers' GPUs within a step: lend when the "
        "predicted wait saved before switch costs is at least margin times their cost.",
    )

    def build(self) -> PaybackPolicy:
        return PaybackPolicy(self)


def saving_over_horizon_s(
    stay: CandidatePrediction, move: CandidatePrediction, *, horizon_steps: int
) -> float:
    """Predicted time saved by running `horizon_steps` steps on `move` instead of `stay`."""
    return (stay.predicted_step_s - move.predicted_step_s) * horizon_steps


class PaybackPolicy:
    """Stateless: every decision is a function of the observation's predictions."""

    def __init__(self, config: PaybackConfig) -> None:
        self.config = config

    def horizon_steps(self, obs: StepObservation) -> int:
        horizon = self.config.horizon_steps
        if self.config.cap_horizon_at_remaining_steps and obs.remaining_steps is not None:
            horizon = min(horizon, obs.remaining_steps)
        return horizon

    def decide(self, obs: StepObservation) -> Decision:
        decision = self._resize_decision(obs)
        if obs.lending is None or not self.config.lend:
            return decision
        offer = obs.lending
        switch_s = offer.predicted_switch_s
        gross_s = offer.predicted_saving_s + switch_s
        if offer.predicted_saving_s <= 0.0 or gross_s < switch_s * self.config.margin:
            return decision
        if offer.lent_replicas == 0:
            return decision
        return decision.with_lend(
            LendAction(),
            f"lend: predicted saving {gross_s:.1f} s repays switch cost {switch_s:.1f} s",
        )

    def _resize_decision(self, obs: StepObservation) -> Decision:
        horizon = self.horizon_steps(obs)
        if horizon <= 0:
            return Decision.hold("no steps left to pay back a resize")
        stay = obs.candidate(obs.allocation)
        best: tuple[float, int, Allocation] | None = None
        for move in obs.candidates:
            if move.allocation == obs.allocation:
                continue
            saving_s = saving_over_horizon_s(stay, move, horizon_steps=horizon)
            cost_s = move.predicted_resize_total_s
            if saving_s <= 0.0 or saving_s < cost_s * self.config.margin:
                continue
            gpus_moved = abs(move.allocation.train_gpus - obs.allocation.train_gpus)
            key = (saving_s - cost_s, -gpus_moved, move.allocation)
            if best is None or key[:2] > best[:2]:
                best = key
        if best is None:
            return Decision.hold(f"no candidate repays its cost within {horizon} step(s)")
        net_s, _, target = best
        return Decision.resize(
            target, f"predicted net gain {net_s:.1f} s over {horizon} step(s) (margin met)"
        )

    def reset(self) -> None:
        return None
