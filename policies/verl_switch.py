"""`verl_switch`: verl's `separate_async` step-switch rule, moved to step boundaries.

The rule in verl (trainer `separate_async` with `enable_switch`): at the end of every step,

- adapt the reclaim threshold ratio: after `switch_threshold_release_steps` consecutive steps in
  which the trainer waited for samples ("idle"), raise it by `switch_threshold_step_up`; after as
  many consecutive calm steps, lower it by `switch_threshold_step_down`; the count saturates, so
  every further idle (calm) step moves the ratio again; the ratio stays in
  [1 / parameter_sync_step, 1];
- `remaining` = threshold - samples of the next batch already ready;
- `benefit` = remaining * observed wait per sample * (1 - 1 / scaling), where scaling is the
  rollout capacity with the trainer's GPUs lent over the capacity without them;
- `cost` = moving mean of the measured lend costs + moving mean of the measured reclaim costs
  over the last `switch_cost_window_size` of each;
- lend when this is not the last step, remaining > 0 and (benefit > cost, or either is still
  unknown: the cold start lends).

verl lends rollout capacity *within* a step (the lent replicas come back once the threshold of
samples is ready, before training) rather than moving GPUs at a step boundary; `policies.lending`
says how this step-boundary version maps each quantity. Batch fractions stand in for sample
counts: threshold = ratio (one mini-batch = 1 / parameter_sync_step at least), the wait per batch
is the trainer's measured wait divided by the fraction of the batch it waited for.
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


class VerlSwitchConfig(PolicyConfigBase):
    """verl `separate_async` switch parameters, with verl's names and defaults."""

    kind: Literal["verl_switch"] = Field(
        default="verl_switch", description="Selects verl's separate_async switch rule."
    )
    switch_threshold_ratio: float = Field(
        default=0.4,
        gt=0.0,
        le=1.0,
        description="Initial share of the next batch that must be ready before lent GPUs are "
        "taken back; lending pays only while less than this is ready.",
    )
    adaptive_switch_threshold: bool = Field(
        default=True, description="Adapt the threshold ratio from observed trainer waits."
    )
    switch_threshold_step_up: float = Field(
        default=0.05, ge=0.0, le=1.0, description="Ratio increase after sustained trainer waits."
    )
    switch_threshold_step_down: float = Field(
        default=0.03, ge=0.0, le=1.0, description="Ratio decrease after sustained calm steps."
    )
    switch_threshold_release_steps: int = Field(
        default=2, ge=1, description="Consecutive idle (or calm) steps before the ratio moves."
    )
    switch_cost_window_size: int = Field(
        default=3, ge=1, description="Recent measured resizes averaged into the switch cost."
    )
    parameter_sync_step: int = Field(
        default=4,
        ge=1,
        description="PPO mini-batches per step; 1 / parameter_sync_step is the lowest ratio.",
    )
    idle_tolerance_s: float = Field(
        default=2.0,
        ge=0.0,
        description="A step counts as idle when the trainer waited longer than this (verl: the "
        "replay buffer's poll interval).",
    )

    @model_validator(mode="after")
    def _ratio_not_below_floor(self) -> VerlSwitchConfig:
        floor = 1.0 / self.parameter_sync_step
        if self.switch_threshold_ratio < floor:
            raise ValueError(
                f"switch_threshold_ratio {self.switch_threshold_ratio} is below one mini-batch "
                f"(1 / parameter_sync_step = {floor:.3f})"
            )
        return self

    def build(self) -> VerlSwitchPolicy:
        return VerlSwitchPolicy(self)


class VerlSwitchPolicy:
    """State: the adapted ratio, idle/calm counters, the wait-rate estimate, home allocation."""

    def __init__(self, config: VerlSwitchConfig) -> None:
        self.config = config
        self._lending = LendingState()
        self.reset()

    def reset(self) -> None:
        self.threshold_ratio = self.config.switch_threshold_ratio
        self._idle_steps = 0
        self._calm_steps = 0
        self._wait_s_total = 0.0
        self._wait_fraction_total = 0.0
        self._lending.reset()

    def _adapt(self, had_idle: bool) -> None:
        cfg = self.config
        if had_idle:
            self._calm_steps = 0
            self._idle_steps = min(self._idle_steps + 1, cfg.switch_threshold_release_steps)
            if self._idle_steps == cfg.switch_threshold_release_steps:
                self.threshold_ratio = min(1.0, self.threshold_ratio + cfg.switch_threshold_step_up)
            return
        self._idle_steps = 0
        self._calm_steps = min(self._calm_steps + 1, cfg.switch_threshold_release_steps)
        if self._calm_steps == cfg.switch_threshold_release_steps:
            floor = 1.0 / cfg.parameter_sync_step
            self.threshold_ratio = max(floor, self.threshold_ratio - cfg.switch_threshold_step_down)

    def _record_wait(self, wait_s: float, ready_fraction: float) -> None:
        waited_fraction = 1.0 - ready_fraction  # > 0 exactly when the trainer waited
        if waited_fraction > 0.0:
            self._wait_s_total += wait_s
            self._wait_fraction_total += waited_fraction

    def _wait_per_batch_s(self) -> float | None:
        if self._wait_fraction_total <= 0.0:
            return None
        return self._wait_s_total / self._wait_fraction_total

    def decide(self, obs: StepObservation) -> Decision:
        cfg = self.config
        self._lending.observe(obs)
        wait_s = trainer_wait_s(obs.last)
        ready = ready_fraction_at_boundary(obs.last)
        self._record_wait(wait_s, ready)
        if cfg.adaptive_switch_threshold:
            self._adapt(wait_s > cfg.idle_tolerance_s)

        remaining = max(0.0, self.threshold_ratio - ready)
        lend, why = self._should_lend(obs, remaining)
        return self._lending.decide(
            obs, lend=lend, why=why, lend_verb="lend", reclaim_verb="reclaim"
        )

    def _should_lend(self, obs: StepObservation, remaining: float) -> tuple[bool, str]:
        if obs.remaining_steps is not None and obs.remaining_steps <= 0:
            return False, "last step"
        if remaining <= 0.0:
            return False, f"next batch ready beyond threshold {self.threshold_ratio:.2f}"
        home = self._lending.home
        lent = self._lending.lent_allocation(obs)
        wait_per_batch_s = self._wait_per_batch_s()
        cost_s = measured_cycle_cost_s(obs, window=self.config.switch_cost_window_size)
        if lent is None or home is None or wait_per_batch_s is None or cost_s is None:
            return True, f"remaining {remaining:.2f} of a batch, no cost/benefit estimate yet"
        scaling = lent.rollout_gpus / home.rollout_gpus
        benefit_s = remaining * wait_per_batch_s * (1.0 - 1.0 / scaling)
        if benefit_s > cost_s:
            return True, f"benefit {benefit_s:.1f} s > switch cost {cost_s:.1f} s"
        return False, f"benefit {benefit_s:.1f} s <= switch cost {cost_s:.1f} s"
