"""How a resize is measured: from step times alone, so relabelling a phase cannot change it.

- critical path: the gap between the end of the last step on the old split and the start of
  the first step on the new one (everything the pipeline waited for, whatever it was called);
- background cost: how much slower the first step after the resize ran than the step after that
  (work overlapped with that step, including any wait at the deferred-optimizer synchronisation
  point). It is a signed measurement: noise can make it slightly negative, and it is kept so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class StepTimes(Protocol):
    """What a measured step must carry (a traces StepRecord qualifies)."""

    @property
    def start_s(self) -> float: ...

    @property
    def end_s(self) -> float: ...

    @property
    def resize_id(self) -> int | None: ...


@dataclass(frozen=True)
class ResizeCost:
    resize_id: int
    critical_s: float
    """Start of the first step after the resize minus end of the step before it."""
    background_s: float | None
    """First step after minus the step after that; None when no second step followed."""
    first_step_s: float
    next_step_s: float | None


def resize_costs(steps: Sequence[StepTimes]) -> list[ResizeCost]:
    """One cost per resize that has a step before and a step after it, in step order."""
    ordered = sorted(steps, key=lambda s: s.start_s)
    costs = []
    for index, step in enumerate(ordered):
        if step.resize_id is None or index == 0:
            continue
        before = ordered[index - 1]
        after = ordered[index + 1] if index + 1 < len(ordered) else None
        if after is not None and after.resize_id is not None:
            after = None  # the next step follows another resize: no clean comparison
        first_s = step.end_s - step.start_s
        next_s = None if after is None else after.end_s - after.start_s
        costs.append(
            ResizeCost(
                resize_id=step.resize_id,
                critical_s=step.start_s - before.end_s,
                background_s=None if next_s is None else first_s - next_s,
                first_step_s=first_s,
                next_step_s=next_s,
            )
        )
    return costs
