"""`greedy`: resize one notch whenever the last step's imbalance points away from balance.

The thrashing baseline: no smoothing, no memory, no cost awareness. On a workload whose balance
point lies between two candidates it moves back and forth every step, which is what the
hysteresis and cost-aware policies are there to prevent.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import PolicyConfigBase
from .moves import MoveMode, choose_target, direction_of_imbalance
from .signals import imbalance
from .types import Decision, StepObservation


class GreedyConfig(PolicyConfigBase):
    """React to every step's raw imbalance."""

    kind: Literal["greedy"] = Field(default="greedy", description="Selects the greedy policy.")
    deadband: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="Hold while |imbalance| of the last step is at most this (0: any imbalance "
        "triggers a move).",
    )
    move_mode: MoveMode = Field(
        default=MoveMode.ONE_NOTCH,
        description="one_notch: to the nearest candidate; predicted_best: to the candidate in "
        "that direction with the lowest predicted step time.",
    )

    def build(self) -> GreedyPolicy:
        return GreedyPolicy(self)


class GreedyPolicy:
    """Stateless: every decision depends on the last step only."""

    def __init__(self, config: GreedyConfig) -> None:
        self.config = config

    def decide(self, obs: StepObservation) -> Decision:
        signal = imbalance(obs.last)
        if abs(signal) <= self.config.deadband:
            return Decision.hold(f"imbalance {signal:+.3f} inside deadband")
        direction = direction_of_imbalance(signal)
        assert direction is not None  # |signal| > deadband >= 0
        target = choose_target(obs, direction, self.config.move_mode)
        if target is None:
            return Decision.hold(f"imbalance {signal:+.3f} but no candidate {direction._value_}")
        return Decision.resize(target, f"imbalance {signal:+.3f}: move {direction._value_}")

    def reset(self) -> None:
        return None
