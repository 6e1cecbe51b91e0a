"""`hysteresis`: the paper's controller (DynaResize section 3.4).

A resize costs minutes (the paper measured 187 s overlapped, 255 s stop-and-rebuild) and pays
back only over about a dozen sustained steps, so the controller moves only on a sustained,
directional imbalance. Its filters, applied in this order at every step boundary:

1. The signed imbalance of the just-completed step (`policies.signals.imbalance`) is smoothed
   by an EWMA that restarts whenever the measured step ran on another allocation.
2. Cooldown: for `cooldown_steps` boundaries after a resize it decided, the controller neither
   resizes nor counts signals (those steps are disturbed by the resize itself).
3. Band: a smoothed imbalance >= `up_threshold` is a signal to grow Rollout; <= `-down_threshold`
   a signal to grow Training. Inside the band the signal count returns to zero.
4. Consecutive signals: it moves only after `consecutive_signals` same-direction signals in a row.
5. Dwell: it never leaves an allocation that has run fewer than `dwell_steps` steps (the initial
   one included), whoever made the last resize.
6. Target: only candidate allocations; one notch at a time or straight to the candidate in the
   signalled direction with the lowest predicted step time (`move_mode`).

Where the pipeline offers lending the trainers' GPUs within a step, the same band and count
decide it (`lend`): it lends after `consecutive_signals` boundaries in a row at which the
caller's predicted wait of training is at least `up_threshold` of the predicted step and lending
is predicted to save time. No cooldown or dwell: a lend ends within its step.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import PolicyConfigBase
from .moves import Direction, MoveMode, choose_target
from .signals import imbalance
from .smoothing import AllocationEwma
from .types import Decision, LendAction, StepObservation


class HysteresisConfig(PolicyConfigBase):
    """Separate up/down thresholds on a smoothed imbalance, plus count, dwell and cooldown."""

    kind: Literal["hysteresis"] = Field(
        default="hysteresis", description="Selects the paper's hysteresis controller."
    )
    up_threshold: float = Field(
        default=0.15,
        gt=0.0,
        le=1.0,
        description="Smoothed imbalance at or above which a step signals 'grow Rollout' "
        "(imbalance = (rollout_s - train_s) / max of the two).",
    )
    down_threshold: float = Field(
        default=0.15,
        gt=0.0,
        le=1.0,
        description="Smoothed imbalance at or below minus this signals 'grow Training'.",
    )
    smoothing_alpha: float = Field(
        default=0.5,
        gt=0.0,
        le=1.0,
        description="EWMA weight of the newest step's imbalance (1: no smoothing).",
    )
    consecutive_signals: int = Field(
        default=3,
        ge=1,
        description="Same-direction signals needed in a row before a resize.",
    )
    dwell_steps: int = Field(
        default=3,
        ge=0,
        description="Minimum completed steps on an allocation (the initial one included) before "
        "leaving it.",
    )
    cooldown_steps: int = Field(
        default=12,
        ge=0,
        description="Step boundaries after a resize during which the controller neither resizes "
        "nor counts signals. The paper uses more than 10 (its break-even is about 11 steps).",
    )
    move_mode: MoveMode = Field(
        default=MoveMode.ONE_NOTCH,
        description="one_notch: to the nearest candidate; predicted_best: to the candidate in the "
        "signalled direction with the lowest predicted step time.",
    )
    lend: bool = Field(
        default=True,
        description="Where the pipeline can lend the trainers' GPUs within a step: lend after "
        "consecutive_signals boundaries whose predicted wait of training is at least "
        "up_threshold of the predicted step and lending is predicted to save time.",
    )

    def build(self) -> HysteresisPolicy:
        return HysteresisPolicy(self)


class HysteresisPolicy:
    """Stateful: the EWMA, the running signal count and the step of its last resize."""

    def __init__(self, config: HysteresisConfig) -> None:
        self.config = config
        self._ewma = AllocationEwma(alpha=config.smoothing_alpha)
        self.reset()

    def reset(self) -> None:
        self._ewma.reset()
        self._streak_direction: Direction | None = None
        self._streak_count = 0
        self._last_resize_step: int | None = None
        self._lend_streak = 0

    def _count(self, direction: Direction | None) -> None:
        if direction is None:
            self._streak_direction, self._streak_count = None, 0
        elif direction is self._streak_direction:
            self._streak_count += 1
        else:
            self._streak_direction, self._streak_count = direction, 1

    def decide(self, obs: StepObservation) -> Decision:
        decision = self._resize_decision(obs)
        if obs.lending is None or not self.config.lend:
            return decision
        return self._with_lending(obs, decision)

    def _with_lending(self, obs: StepObservation, decision: Decision) -> Decision:
        """The decision, lending when the band has held for `consecutive_signals` boundaries."""
        offer = obs.lending
        assert offer is not None
        cfg = self.config
        predicted_step_s = obs.candidate(obs.allocation).predicted_step_s
        share = offer.predicted_wait_s / predicted_step_s if predicted_step_s > 0 else 0.0
        signal = share >= cfg.up_threshold and offer.predicted_saving_s > 0.0
        self._lend_streak = self._lend_streak + 1 if signal else 0
        if not signal:
            return decision
        if self._lend_streak < cfg.consecutive_signals or offer.lent_replicas == 0:
            return decision.with_lend(
                None, f"lend signal {self._lend_streak}/{cfg.consecutive_signals}"
            )
        return decision.with_lend(
            LendAction(),
            f"lend: predicted wait {share:.0%} of the step, saving "
            f"{offer.predicted_saving_s:.1f} s",
        )

    def _resize_decision(self, obs: StepObservation) -> Decision:
        # Called at every step boundary of every run: the filters' arithmetic (the cooldown, the
        # band, the count) is written out here rather than in a method each.
        cfg = self.config
        last = obs.last
        smoothed = self._ewma.update(imbalance(last), allocation=last.allocation)
        if self._last_resize_step is not None:
            # Boundaries of cooldown left, this one included: it covers the `cooldown_steps`
            # boundaries right after the resize.
            cooldown_left = cfg.cooldown_steps - (obs.step - self._last_resize_step) + 1
            if cooldown_left > 0:
                self._count(None)
                return Decision.hold(f"cooldown: {cooldown_left} more step(s)")

        if smoothed >= cfg.up_threshold:
            direction = _TO_ROLLOUT
        elif smoothed <= -cfg.down_threshold:
            direction = _TO_TRAIN
        else:
            self._streak_direction, self._streak_count = None, 0
            return Decision.hold(f"smoothed imbalance {smoothed:+.3f} inside band")
        if direction is self._streak_direction:
            self._streak_count += 1
        else:
            self._streak_direction, self._streak_count = direction, 1
        if self._streak_count < cfg.consecutive_signals:
            return Decision.hold(
                f"signal {direction._value_} {self._streak_count}/{cfg.consecutive_signals}"
            )

        steps_on_allocation = (
            obs.steps_since_resize if obs.steps_since_resize is not None else obs.step + 1
        )
        if steps_on_allocation < cfg.dwell_steps:
            return Decision.hold(f"dwell: {steps_on_allocation}/{cfg.dwell_steps} step(s)")

        target = choose_target(obs, direction, cfg.move_mode)
        if target is None:
            return Decision.hold(f"signal {direction._value_} but no better candidate that way")

        self._last_resize_step = obs.step
        self._count(None)
        self._ewma.reset()
        return Decision.resize(
            target,
            f"smoothed imbalance {smoothed:+.3f} for {cfg.consecutive_signals} step(s): "
            f"move {direction._value_}",
        )


_TO_ROLLOUT = Direction.TO_ROLLOUT
_TO_TRAIN = Direction.TO_TRAIN
