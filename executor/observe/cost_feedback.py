"""Online feedback: per-candidate resize-cost predictions from the resizes this run has measured.

A live run starts with the twin's resize cost model (its defaults, or parameters fitted with
`--costs`). Once it has resized, it knows better: the measured critical path of a transition (the
gap between the last step on the old split and the first step on the new one) and its background
cost (how much slower the first step on the new split ran than the step after it). This module
keeps a rolling window of those measurements, as verl's switch-cost window does, and answers, for
each candidate, the cost of moving there from the current split:

1. the mean over the window of the same transition (`from -> to`), if it was measured;
2. else the mean over the window of transitions moving the same number of GPUs in the same
   direction (train -> rollout or rollout -> train), which do the same work on other ranks;
3. else the mean over the window of every measured resize (the verl rule);
4. else the fallback the run started with (the twin's model: `calibrated` or `model`).

The first three are `CostSource.MEASURED`; the fourth keeps the fallback's source, so a decision
record can say which estimate the policy saw. Pure Python with no executor imports: the driver
feeds it step and resize measurements and reads predictions back, and tests drive it directly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Protocol

from dynaresize.policies.types import (
    Allocation,
    CandidatePrediction,
    CostSource,
    Decision,
    StepObservation,
)

DEFAULT_WINDOW_SIZE = 3
"""verl's `switch_cost_window_size`: the last three measurements decide."""


class MatchLevel(str, Enum):
    """How closely the measurements behind an estimate match the transition asked about."""

    SAME_TRANSITION = "same_transition"
    SAME_SHIFT = "same_shift"
    ANY_RESIZE = "any_resize"
    FALLBACK = "fallback"


class StepLike(Protocol):
    """What `observe_step_record` reads of a completed step (a traces StepRecord qualifies)."""

    @property
    def start_s(self) -> float: ...

    @property
    def end_s(self) -> float: ...

    @property
    def step_s(self) -> float: ...

    @property
    def train_gpus(self) -> int: ...

    @property
    def rollout_gpus(self) -> int: ...

    @property
    def resize_id(self) -> int | None: ...


@dataclass(frozen=True)
class MeasuredResize:
    """One resize as the run measured it."""

    resize_id: int
    from_allocation: Allocation
    to_allocation: Allocation
    critical_s: float
    """Start of the first step on the new split minus end of the last step on the old one."""
    background_s: float | None = None
    """First step on the new split minus the step after it; None until both have run."""

    @property
    def shift_gpus(self) -> int:
        """GPUs moved to Training (positive) or to Rollout (negative)."""
        return self.to_allocation.train_gpus - self.from_allocation.train_gpus


@dataclass(frozen=True)
class ResizeCostEstimate:
    """The predicted cost of one transition and where it came from."""

    critical_s: float
    background_s: float
    source: CostSource
    match: MatchLevel
    num_measurements: int
    """Measurements averaged (0 for the fallback)."""


class ResizeCostFeedback:
    """Rolling windows of measured resize costs, turned into per-candidate predictions."""

    def __init__(
        self,
        *,
        fallback_critical_s: float,
        fallback_background_s: float,
        fallback_source: CostSource,
        window_size: int = DEFAULT_WINDOW_SIZE,
        fallback_replaces: bool = False,
    ) -> None:
        """`fallback_replaces`: until a resize is measured, every candidate gets the fallback
        figure instead of its own cost; for a prior of this very run (its setup timings,
        `setup_prior.py`), which knows the run's size and hardware where the candidates' own
        costs come from the twin's default model."""
        if window_size < 1:
            raise ValueError(f"window_size must be at least 1, got {window_size}")
        if fallback_critical_s < 0 or fallback_background_s < 0:
            raise ValueError("fallback resize costs must be non-negative")
        if fallback_source is CostSource.MEASURED:
            raise ValueError("the fallback is a model's prediction, not a measurement")
        self.fallback = ResizeCostEstimate(
            critical_s=fallback_critical_s,
            background_s=fallback_background_s,
            source=fallback_source,
            match=MatchLevel.FALLBACK,
            num_measurements=0,
        )
        self.window_size = window_size
        self.fallback_replaces = fallback_replaces
        self.resizes: list[MeasuredResize] = []
        self._previous_step: tuple[float, Allocation] | None = None
        """End time and split of the last step fed to `observe_step_record`."""
        self._awaiting_background: int | None = None
        """Index in `resizes` of the resize whose first step has run and whose second has not."""
        self._first_step_s: float | None = None

    # --- feeding measurements ---------------------------------------------------------------

    def observe_resize(
        self,
        *,
        resize_id: int,
        from_allocation: Allocation,
        to_allocation: Allocation,
        critical_s: float,
    ) -> None:
        """A resize's critical path, once the first step on the new split has started."""
        if critical_s < 0:
            raise ValueError(f"resize {resize_id}: critical path {critical_s} s is negative")
        self.resizes.append(
            MeasuredResize(
                resize_id=resize_id,
                from_allocation=from_allocation,
                to_allocation=to_allocation,
                critical_s=float(critical_s),
            )
        )
        self._awaiting_background = None
        self._first_step_s = None

    def observe_step(self, *, step_s: float, resize_id: int | None) -> None:
        """A completed step: the first step after a resize, and the one after it, give the
        resize's background cost. A step that follows another resize leaves it unmeasured."""
        if resize_id is not None:
            index = self._index_of(resize_id)
            self._awaiting_background = index
            self._first_step_s = float(step_s)
            return
        if self._awaiting_background is None or self._first_step_s is None:
            return
        index = self._awaiting_background
        self.resizes[index] = replace(
            self.resizes[index], background_s=self._first_step_s - float(step_s)
        )
        self._awaiting_background = None
        self._first_step_s = None

    def observe_step_record(self, record: StepLike) -> None:
        """Feed one completed step as the executor records it (a `StepRecord` qualifies).

        The first step on a new split (its `resize_id` is set) gives that resize's critical
        path, the gap since the previous step ended, as executor/observe/measure.py defines
        it; with the step after it, its background cost. One call per step, in step order.
        """
        allocation = Allocation(train_gpus=record.train_gpus, rollout_gpus=record.rollout_gpus)
        resize_id = record.resize_id
        previous, self._previous_step = self._previous_step, (record.end_s, allocation)
        if resize_id is not None and previous is not None:
            end_s, before = previous
            self.observe_resize(
                resize_id=resize_id,
                from_allocation=before,
                to_allocation=allocation,
                critical_s=max(0.0, record.start_s - end_s),
            )
        elif resize_id is not None:
            resize_id = None  # no step before it in this session (a resumed run): no gap to read
        self.observe_step(step_s=record.step_s, resize_id=resize_id)

    def _index_of(self, resize_id: int) -> int:
        for index in range(len(self.resizes) - 1, -1, -1):
            if self.resizes[index].resize_id == resize_id:
                return index
        raise KeyError(f"resize {resize_id} was never observed")

    # --- predictions --------------------------------------------------------------------------

    @property
    def measured_critical_s(self) -> tuple[float, ...]:
        """Every measured critical path, oldest first (the observation's measured costs)."""
        return tuple(r.critical_s for r in self.resizes)

    def estimate(self, *, current: Allocation, target: Allocation) -> ResizeCostEstimate:
        """The predicted cost of moving from `current` to `target` (zero to stay)."""
        if target == current:
            return ResizeCostEstimate(0.0, 0.0, self._source_for_staying(), MatchLevel.FALLBACK, 0)
        shift = target.train_gpus - current.train_gpus
        levels = (
            (
                MatchLevel.SAME_TRANSITION,
                lambda r: r.from_allocation == current and r.to_allocation == target,
            ),
            (MatchLevel.SAME_SHIFT, lambda r: r.shift_gpus == shift),
            (MatchLevel.ANY_RESIZE, lambda r: True),
        )
        for level, matches in levels:
            window = [r for r in self.resizes if matches(r)][-self.window_size :]
            if window:
                return self._mean_of(window, level)
        return self.fallback

    def _mean_of(self, window: list[MeasuredResize], level: MatchLevel) -> ResizeCostEstimate:
        critical_s = sum(r.critical_s for r in window) / len(window)
        backgrounds = [r.background_s for r in window if r.background_s is not None]
        # A signed measurement (noise can make it negative); a prediction of a cost cannot be.
        if backgrounds:
            background_s = max(0.0, sum(backgrounds) / len(backgrounds))
        else:
            background_s = self.fallback.background_s
        return ResizeCostEstimate(
            critical_s=critical_s,
            background_s=background_s,
            source=CostSource.MEASURED,
            match=level,
            num_measurements=len(window),
        )

    def _source_for_staying(self) -> CostSource:
        return CostSource.MEASURED if self.resizes else self.fallback.source

    def with_costs(
        self, predictions: tuple[CandidatePrediction, ...], *, current: Allocation
    ) -> tuple[CandidatePrediction, ...]:
        """The same predictions with each candidate's resize cost (and source) from here.

        Until some resize has been measured, a candidate keeps the cost it came with: the
        estimator prices each move by the twin's plan of that very move, which a single fallback
        figure would flatten; unless `fallback_replaces` (a prior from the run's own setup)."""
        out = []
        for prediction in predictions:
            estimate = self.estimate(current=current, target=prediction.allocation)
            if estimate is self.fallback and not self.fallback_replaces:
                out.append(prediction)
                continue
            out.append(
                prediction.model_copy(
                    update={
                        "predicted_resize_critical_s": estimate.critical_s,
                        "predicted_resize_background_s": estimate.background_s,
                        "cost_source": estimate.source,
                    }
                )
            )
        return tuple(out)


_TRUST_ORDER = (CostSource.MODEL, CostSource.CALIBRATED, CostSource.MEASURED)


def decision_cost_source(obs: StepObservation, decision: Decision) -> CostSource:
    """Which resize-cost estimate a decision rested on, for its record.

    A resize rested on its target's estimate. A hold weighed every other candidate: it is
    `measured` only when all of them were; otherwise the least direct source among them.
    """
    if decision.is_resize and decision.target is not None:
        return obs.candidate(decision.target).cost_source
    others = [c.cost_source for c in obs.candidates if c.allocation != obs.allocation]
    if not others:
        current = [c.cost_source for c in obs.candidates]
        return current[0] if current else CostSource.MODEL
    return min(others, key=_TRUST_ORDER.index)
