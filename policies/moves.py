"""Where a policy may move: only among the candidate allocations the caller offers.

Candidates are ordered by training GPUs. "Towards rollout" means fewer training GPUs, more
rollout GPUs; the helpers never invent an allocation that is not a candidate.
"""

from __future__ import annotations

from enum import Enum
from operator import attrgetter

from .types import Allocation, StepObservation

_train_gpus = attrgetter("train_gpus")


class Direction(str, Enum):
    """Which role gains GPUs. Policies that write a direction into a reason at every step
    boundary read its text as `_value_` (the member's attribute), not through the `value`
    property, which costs a Python call each time."""

    TO_ROLLOUT = "to_rollout"
    """Rollout is the bottleneck: move GPUs from Training to Rollout."""
    TO_TRAIN = "to_train"
    """Training is the bottleneck: move GPUs from Rollout to Training."""


class MoveMode(str, Enum):
    """How far a policy moves once it has decided to move."""

    ONE_NOTCH = "one_notch"
    """To the nearest candidate in the chosen direction."""
    PREDICTED_BEST = "predicted_best"
    """To the candidate in the chosen direction with the lowest predicted step time."""


_ONE_NOTCH = MoveMode.ONE_NOTCH


def direction_of_imbalance(imbalance: float) -> Direction | None:
    """The direction a signed imbalance (positive: rollout-bound) points; None when balanced."""
    if imbalance > 0.0:
        return Direction.TO_ROLLOUT
    if imbalance < 0.0:
        return Direction.TO_TRAIN
    return None


def candidates_towards(obs: StepObservation, direction: Direction) -> list[Allocation]:
    """Candidates strictly in `direction` from the current allocation, nearest first."""
    # Filtered before sorted: the same list as filtering `obs.candidate_allocations()` (a stable
    # sort keeps equal ones in the order given either way), without sorting at the edge of the
    # candidate set, where a policy that keeps signalling asks at every step and gets none.
    current = obs.allocation.train_gpus
    if direction is Direction.TO_ROLLOUT:
        towards = [c.allocation for c in obs.candidates if c.allocation.train_gpus < current]
        if len(towards) > 1:
            towards.sort(key=_train_gpus, reverse=True)  # most training GPUs (nearest) first
        return towards
    towards = [c.allocation for c in obs.candidates if c.allocation.train_gpus > current]
    if len(towards) > 1:
        towards.sort(key=_train_gpus, reverse=True)
        towards.reverse()  # fewest training GPUs (nearest) first, as reversing the whole order
    return towards


def one_notch(obs: StepObservation, direction: Direction) -> Allocation | None:
    """The nearest candidate in `direction`, or None at the edge of the candidate set.

    `candidates_towards(obs, direction)[0]`, found in one pass without the list: a policy
    asks at nearly every step boundary. Among candidates of equal training GPUs that list
    puts the first given first towards rollout and the last given first towards training
    (its stable descending sort, reversed), so ties are kept or replaced to match.
    """
    current = obs.allocation.train_gpus
    nearest: Allocation | None = None
    if direction is Direction.TO_ROLLOUT:
        for prediction in obs.candidates:
            allocation = prediction.allocation
            gpus = allocation.train_gpus
            if gpus < current and (nearest is None or gpus > nearest.train_gpus):
                nearest = allocation
        return nearest
    for prediction in obs.candidates:
        allocation = prediction.allocation
        gpus = allocation.train_gpus
        if gpus > current and (nearest is None or gpus <= nearest.train_gpus):
            nearest = allocation
    return nearest


def predicted_best(obs: StepObservation, direction: Direction) -> Allocation | None:
    """The candidate in `direction` with the lowest predicted step time, if it beats staying.

    Ties go to the nearer candidate (smaller move). None when no candidate in that direction is
    predicted faster than the current allocation.
    """
    stay_s = obs.candidate(obs.allocation).predicted_step_s
    best: Allocation | None = None
    best_s = stay_s
    for allocation in candidates_towards(obs, direction):
        step_s = obs.candidate(allocation).predicted_step_s
        if step_s < best_s:
            best, best_s = allocation, step_s
    return best


def choose_target(obs: StepObservation, direction: Direction, mode: MoveMode) -> Allocation | None:
    if mode is _ONE_NOTCH:
        return one_notch(obs, direction)
    return predicted_best(obs, direction)
