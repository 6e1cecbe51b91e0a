"""`verl_switch`: verl's `separate_async` step-switch rule (V1 trainer, `enable_switch`).

The rule in verl, at the end of every step, in this order:

1. record the step's wait: its wait for samples and the samples it waited for are added to
   running totals (per-sample wait = total wait / total waited samples);
2. adapt the reclaim threshold ratio: after `switch_threshold_release_steps` consecutive steps in
   which the trainer waited for samples longer than the buffer's poll interval ("idle"), raise it
   by `switch_threshold_step_up`; after as many consecutive calm steps, lower it by
   `switch_threshold_step_down`; the count saturates, so every further idle (calm) step moves the
   ratio again; the ratio stays in [1 / parameter_sync_step, 1];
3. `remaining` = threshold - samples of the next batch already ready;
4. `benefit` = remaining * per-sample wait * (1 - 1 / scaling), where scaling is the rollout
   capacity with the trainer's replicas lent over the capacity without them;
5. `cost` = mean of the last `switch_cost_window_size` measured switches to rollout + mean of as
   many switches back to the trainer;
6. lend when this is not the last step, remaining > 0 and (benefit > cost, or either is still
   unknown: the cold start lends); the lent replicas return once the threshold is ready.

Sample counts are shares of one step's batch (threshold = ratio, at least one mini-batch).
Where the caller lends within a step, the answer is exactly that, with the offer's measured
activate and deactivate phases and its replica counts; elsewhere `policies.lending` maps it
onto resizes (scaling from the lent allocation's rollout GPUs, a cycle's cost twice the mean
measured resize).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import PolicyConfigBase
from .lending import WaitSignals, measured_cycle_cost_s, window_mean
from .types import StepObservation
from .verl_rule import VerlRule


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
        default=3, ge=1, description="Recent measured switches averaged into the switch cost."
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


class VerlSwitchPolicy(VerlRule):
    """State: the adapted ratio, idle/calm counters, the running wait totals."""

    config: VerlSwitchConfig
    lend_verb = "lend"
    reclaim_verb = "reclaim"

    def _reset_rule(self) -> None:
        self.threshold_ratio = self.config.switch_threshold_ratio
        self._idle_steps = 0
        self._calm_steps = 0
        self._wait_s_total = 0.0
        self._wait_fraction_total = 0.0

    def return_fraction(self) -> float:
        return self.threshold_ratio

    def _rule(self, obs: StepObservation, signals: WaitSignals) -> tuple[bool, str]:
        cfg = self.config
        if signals.waited_fraction > 0.0:
            self._wait_s_total += signals.wait_s
            self._wait_fraction_total += signals.waited_fraction
        if cfg.adaptive_switch_threshold:
            self._adapt(signals.wait_s > cfg.idle_tolerance_s)
        return self._should_lend(obs, max(0.0, self.threshold_ratio - signals.ready))

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

    def _wait_per_batch_s(self) -> float | None:
        if self._wait_fraction_total <= 0.0:
            return None
        return self._wait_s_total / self._wait_fraction_total

    def _scaling_and_cost(self, obs: StepObservation) -> tuple[float | None, float | None]:
        """Rollout capacity lent over home, and one switch cycle's measured cost."""
        window = self.config.switch_cost_window_size
        offer = obs.lending
        if offer is not None:
            scaling = (offer.rollout_replicas + offer.lent_replicas) / offer.rollout_replicas
            to_rollout = window_mean(offer.measured_activate_s, window)
            to_trainer = window_mean(offer.measured_deactivate_s, window)
            if to_rollout is None or to_trainer is None:
                return scaling, None
            return scaling, to_rollout + to_trainer
        home, lent = self.home, self.lent_allocation(obs)
        if lent is None or home is None:
            return None, measured_cycle_cost_s(obs, window=window)
        return lent.rollout_gpus / home.rollout_gpus, measured_cycle_cost_s(obs, window=window)

    def _should_lend(self, obs: StepObservation, remaining: float) -> tuple[bool, str]:
        if obs.remaining_steps is not None and obs.remaining_steps <= 0:
            return False, "last step"
        if remaining <= 0.0:
            return False, f"next batch ready beyond threshold {self.threshold_ratio:.2f}"
        scaling, cost_s = self._scaling_and_cost(obs)
        wait_per_batch_s = self._wait_per_batch_s()
        if scaling is None or wait_per_batch_s is None or cost_s is None:
            return True, f"remaining {remaining:.2f} of a batch, no cost/benefit estimate yet"
        benefit_s = remaining * wait_per_batch_s * (1.0 - 1.0 / scaling)
        if benefit_s > cost_s:
            return True, f"benefit {benefit_s:.1f} s > switch cost {cost_s:.1f} s"
        return False, f"benefit {benefit_s:.1f} s <= switch cost {cost_s:.1f} s"
