"""Exponentially weighted moving average of a per-step signal, restarted per allocation.

A measurement taken on one allocation says nothing about the imbalance on another, so the average
restarts whenever the allocation of the measured step changes.
"""

from __future__ import annotations

from .types import Allocation


class AllocationEwma:
    """EWMA `s <- alpha * x + (1 - alpha) * s`, seeded with the first value after a restart."""

    def __init__(self, *, alpha: float) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"smoothing_alpha must be in (0, 1], got {alpha}")
        self._alpha = alpha
        self._value: float | None = None
        self._allocation: Allocation | None = None

    @property
    def value(self) -> float | None:
        return self._value

    def update(self, sample: float, *, allocation: Allocation) -> float:
        # `is` first: a caller hands the same allocation objects back, and pydantic's equality
        # costs more than the rest of the update.
        if self._value is None or (
            allocation is not self._allocation and allocation != self._allocation
        ):
            self._value = sample
            self._allocation = allocation
        else:
            self._value = self._alpha * sample + (1.0 - self._alpha) * self._value
        return self._value

    def reset(self) -> None:
        self._value = None
        self._allocation = None
