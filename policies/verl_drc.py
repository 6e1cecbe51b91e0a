"""`verl_drc`: the rule of verl's DynamicResourceController (fully_async_policy, default policy).

The rule in verl, evaluated after every weight sync:

- deactivate (take the lent replicas back) whenever they are active;
- adapt the deactivate ratio: if the trainer really waited for newly generated samples this
  cycle, raise it by the waited share of the cycle's samples clipped to [0.02, 0.1] (at most 1);
  otherwise lower it by 0.02;
- `gap` = ratio * samples a step needs - samples already generated beyond what was consumed;
- `switch_cost` = mean of the last 3 measured activate+deactivate durations, 10 s with no history;
- the estimated time saved is `gap * per-sample wait time` (the last cycle with a real wait;
  before any, a deliberately pessimistic 1000 s per sample, so it activates);
- activate only when gap > 0 and the estimated time saved exceeds `switch_cost`.

Like verl's separate_async switch, this lends capacity within a step; `policies.lending` says how
the step-boundary version maps it (lend = one notch towards Rollout from the home allocation,
stay lent instead of deactivate-then-activate, batch fractions for sample counts, two measured
transitions per activate+deactivate cycle).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import PolicyConfigBase
from .lending import (
    LendingState,
    measured_cycle_cost_s,
    ready_fraction_at_boundary,
    trainer_wait_s,
)
from .types import Decision, StepObservation


class VerlDrcConfig(PolicyConfigBase):
    """verl DynamicResourceController (default policy) parameters, verl's defaults."""

    kind: Literal["verl_drc"] = Field(
        default="verl_drc", description="Selects verl's DynamicResourceController rule."
    )
    deactivate_ratio: float = Field(
        default=0.3,
        gt=0.0,
        le=1.0,
        description="Initial share of a step's batch that must be ready before lent GPUs return.",
    )
    adaptive_ratio: bool = Field(
        default=True, description="Adapt the deactivate ratio from observed trainer waits."
    )
    ratio_increase_min: float = Field(
        default=0.02, ge=0.0, le=1.0, description="Smallest ratio increase after a waiting step."
    )
    ratio_increase_max: float = Field(
        default=0.1, ge=0.0, le=1.0, description="Largest ratio increase after a waiting step."
    )
    ratio_decrease_step: float = Field(
        default=0.02, ge=0.0, le=1.0, description="Ratio decrease after a step without waiting."
    )
    switch_cost_window_size: int = Field(
        default=3, ge=1, description="Measured switch cycles averaged into the switch cost."
    )
    default_switch_cost_s: float = Field(
        default=10.0, ge=0.0, description="Switch cost assumed before any resize was measured."
    )

    @model_validator(mode="after")
    def _increase_bounds_ordered(self) -> VerlDrcConfig:
        if self.ratio_increase_min > self.ratio_increase_max:
            raise ValueError(
                f"ratio_increase_min {self.ratio_increase_min} exceeds "
                f"ratio_increase_max {self.ratio_increase_max}"
            )
        return self

    def build(self) -> VerlDrcPolicy:
        return VerlDrcPolicy(self)


class VerlDrcPolicy:
    """State: the adapted ratio, the last per-batch wait estimate, the home allocation."""

    def __init__(self, config: VerlDrcConfig) -> None:
        self.config = config
        self._lending = LendingState()
        self.reset()

    def reset(self) -> None:
        self.deactivate_ratio = self.config.deactivate_ratio
        self._wait_per_batch_s: float | None = None
        self._lending.reset()

    def switch_cost_s(self, obs: StepObservation) -> float:
        measured = measured_cycle_cost_s(obs, window=self.config.switch_cost_window_size)
        return self.config.default_switch_cost_s if measured is None else measured

    def _adapt(self, waited_fraction: float) -> None:
        cfg = self.config
        if waited_fraction > 0.0:
            step = min(cfg.ratio_increase_max, max(cfg.ratio_increase_min, waited_fraction))
            self.deactivate_ratio = min(1.0, self.deactivate_ratio + step)
        else:
            self.deactivate_ratio = max(0.0, self.deactivate_ratio - cfg.ratio_decrease_step)

    def decide(self, obs: StepObservation) -> Decision:
        self._lending.observe(obs)
        wait_s = trainer_wait_s(obs.last)
        ready = ready_fraction_at_boundary(obs.last)
        waited_fraction = 1.0 - ready  # > 0 exactly when the trainer waited
        if waited_fraction > 0.0:
            self._wait_per_batch_s = wait_s / waited_fraction
        if self.config.adaptive_ratio:
            self._adapt(waited_fraction)

        activate, why = self._should_activate(obs, gap=self.deactivate_ratio - ready)
        return self._lending.decide(
            obs, lend=activate, why=why, lend_verb="activate", reclaim_verb="deactivate"
        )

    def _should_activate(self, obs: StepObservation, *, gap: float) -> tuple[bool, str]:
        if gap <= 0.0:
            return False, f"next batch ready beyond ratio {self.deactivate_ratio:.2f}"
        cost_s = self.switch_cost_s(obs)
        if self._wait_per_batch_s is None:
            return True, f"gap {gap:.2f} of a batch, no wait-rate estimate yet (pessimistic)"
        saved_s = gap * self._wait_per_batch_s
        if saved_s > cost_s:
            return True, f"estimated saving {saved_s:.1f} s > switch cost {cost_s:.1f} s"
        return False, f"estimated saving {saved_s:.1f} s <= switch cost {cost_s:.1f} s"
