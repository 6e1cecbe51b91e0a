"""The skeleton both verl rules share, written once (`verl_drc`, `verl_switch`).

Each rule keeps its own state (an adapted ratio, wait estimates) and, after every step, says
whether lending the trainers' GPUs pays and until how much of the next batch is ready. The
skeleton reads the wait signals (`lending.WaitSignals`), asks the rule, and answers in the
caller's protocol: a `LendAction` within the step where the observation offers lending, else
resizes one notch towards Rollout from home and back (`lending.LendingState`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from .lending import LendingState, WaitSignals, within_step
from .types import Decision, StepObservation


class VerlRule(ABC):
    """decide() and reset() of a verl rule; subclasses give the rule itself."""

    lend_verb: ClassVar[str]
    """The rule's word for lending (verl's DRC activates, its switch lends)."""
    reclaim_verb: ClassVar[str]

    def __init__(self, config) -> None:
        self.config = config
        self._home = LendingState()
        self.reset()

    def reset(self) -> None:
        self._home.reset()
        self._reset_rule()

    def decide(self, obs: StepObservation) -> Decision:
        self._home.observe(obs)
        lend, why = self._rule(obs, WaitSignals.of(obs))
        if obs.lending is not None:
            return within_step(
                obs, lend=lend, why=why, until=self.return_fraction(), verb=self.lend_verb
            )
        return self._home.decide(
            obs, lend=lend, why=why, lend_verb=self.lend_verb, reclaim_verb=self.reclaim_verb
        )

    @property
    def home(self):
        """The allocation the run started on (None before the first observation)."""
        return self._home.home

    def lent_allocation(self, obs: StepObservation):
        """Step-boundary lending's target: one notch towards Rollout from home."""
        return self._home.lent_allocation(obs)

    @abstractmethod
    def _reset_rule(self) -> None:
        """Back to the rule's initial state."""

    @abstractmethod
    def _rule(self, obs: StepObservation, signals: WaitSignals) -> tuple[bool, str]:
        """Whether lending pays after this step, and why; updates the rule's state in verl's
        order."""

    @abstractmethod
    def return_fraction(self) -> float:
        """Share of the awaited batch ready when the lent replicas go back to training."""
