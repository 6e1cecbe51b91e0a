"""`verl_drc`: the rule of verl's DynamicResourceController (fully_async_policy, default policy).

The rule in verl, evaluated after every weight sync, in this order:

1. activation gate, with the ratio as it stands: `gap` = ratio * samples a step needs - samples
   already generated beyond what was consumed; only when `gap > 0` is the per-sample wait
   re-estimated from this cycle (its wait over the samples it waited for; kept from the last
   cycle that waited, a deliberately pessimistic 1000 s per sample before any, so it
   activates unless the switch costs more still); activate when the estimated time saved,
   `gap * per-sample wait`, exceeds
   `switch_cost` = mean of the last 3 measured activate+deactivate cycles (10 s with none);
2. adapt the ratio: after a cycle in which the trainer really waited for newly generated
   samples, raise it by the waited share of the cycle's samples clipped to [0.02, 0.1] (at most
   1); otherwise lower it by 0.02 (verl sets no floor);
3. before the next training the lent replicas are deactivated once `ratio * samples a step
   needs` are ready (the adapted ratio).

Sample counts are shares of one step's batch (the offer says how many samples a step needs,
for the seed). Where the caller lends within a step, the answer is exactly that
(`LendAction(until_ready_fraction=ratio)`, clamped to [0, 1]) and the switch costs are the
offer's measured cycles; elsewhere `policies.lending` maps it onto resizes (and, with no sample
count, the cold start activates).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import PolicyConfigBase
from .lending import WaitSignals, measured_cycle_cost_s, window_mean
from .types import StepObservation
from .verl_rule import VerlRule


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
        default=10.0, ge=0.0, description="Switch cost assumed before any switch was measured."
    )
    initial_per_sample_wait_s: float = Field(
        default=1000.0,
        ge=0.0,
        description="Wait per sample assumed before any was measured: deliberately pessimistic, "
        "so that the gate activates until real waits narrow it (verl's seed); where the caller "
        "lends within a step and says how many samples a step needs.",
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


class VerlDrcPolicy(VerlRule):
    """State: the adapted ratio and the last per-batch wait estimate."""

    config: VerlDrcConfig
    lend_verb = "activate"
    reclaim_verb = "deactivate"

    def _reset_rule(self) -> None:
        self.deactivate_ratio = self.config.deactivate_ratio
        self._wait_per_batch_s: float | None = None

    def switch_cost_s(self, obs: StepObservation) -> float:
        window = self.config.switch_cost_window_size
        if obs.lending is not None:
            measured = window_mean(obs.lending.measured_cycles_s, window)
        else:
            measured = measured_cycle_cost_s(obs, window=window)
        return self.config.default_switch_cost_s if measured is None else measured

    def return_fraction(self) -> float:
        return min(1.0, max(0.0, self.deactivate_ratio))

    def _rule(self, obs: StepObservation, signals: WaitSignals) -> tuple[bool, str]:
        activate, why = self._gate(obs, signals)
        if self.config.adaptive_ratio:
            self._adapt(signals.waited_fraction)
        return activate, why

    def _gate(self, obs: StepObservation, signals: WaitSignals) -> tuple[bool, str]:
        gap = self.deactivate_ratio - signals.ready
        if gap <= 0.0:
            return False, f"next batch ready beyond ratio {self.deactivate_ratio:.2f}"
        if signals.waited_fraction > 0.0:
            self._wait_per_batch_s = signals.wait_s / signals.waited_fraction
        cost_s = self.switch_cost_s(obs)
        wait_per_batch_s = self._wait_per_batch_s
        if wait_per_batch_s is None:
            if obs.lending is None:
                return True, f"gap {gap:.2f} of a batch, no wait-rate estimate yet (pessimistic)"
            per_sample = self.config.initial_per_sample_wait_s
            wait_per_batch_s = per_sample * obs.lending.samples_per_step
        saved_s = gap * wait_per_batch_s
        if saved_s > cost_s:
            return True, f"estimated saving {saved_s:.1f} s > switch cost {cost_s:.1f} s"
        return False, f"estimated saving {saved_s:.1f} s <= switch cost {cost_s:.1f} s"

    def _adapt(self, waited_fraction: float) -> None:
        cfg = self.config
        if waited_fraction > 0.0:
            step = min(cfg.ratio_increase_max, max(cfg.ratio_increase_min, waited_fraction))
            self.deactivate_ratio = min(1.0, self.deactivate_ratio + step)
        else:
            self.deactivate_ratio -= cfg.ratio_decrease_step
