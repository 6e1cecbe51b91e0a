"""The first training step after a resize: how much longer it takes than the train stage's model.

The rate fit (`fit_train`) leaves these steps out, since they are not steady; what they cost
beyond the model is a cost of the resize, paid in the next training stage. On trainers that share
one device it can be seconds (a new layout's buffers and allocations, the leaving role's memory
still held), far more than the background work's contention the plan would otherwise charge.

Each such step's excess is its measured training time minus the model's prediction for its
tokens and trainer count, floored at 0. The figure kept is the median: a handful of these steps
per run, some with the excess and some without, where a mean would follow the largest one. The
general figure is the median of all of them; a trainer count with at least `MIN_STEPS_PER_COUNT`
such steps gets its own median, and every other count takes the general figure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..costs.memory import ModelConfig
from ..costs.train import TrainCostParams
from .fit_train import train_predictions

MIN_STEPS_PER_COUNT = 2
"""Steps after a resize a trainer count needs before it gets its own figure: with one, a
single step's noise would be that count's whole prediction."""


@dataclass(frozen=True)
class FirstStepFit:
    """The fitted excess of the first training step after a resize, and how it was found."""

    general_s: float
    by_trainers: dict[int, float]
    excess_s: np.ndarray
    """Each first step's measured excess (floored at 0), in step order."""
    trainers: np.ndarray
    """The trainer count of each of those steps."""

    def describe(self) -> str:
        if not len(self.excess_s):
            return "first training step after a resize: no such step in the traces, 0 s"
        counts = ", ".join(
            f"{n} trainer(s) {self.by_trainers[n]:.3g} s "
            f"(median of {int(np.sum(self.trainers == n))})"
            for n in sorted(self.by_trainers)
        )
        return (
            f"first training step after a resize: {self.general_s:.3g} s beyond the train model "
            f"(median of {len(self.excess_s)} steps, range {self.excess_s.min():.3g}-"
            f"{self.excess_s.max():.3g} s)"
            + (f"; per trainer count: {counts}" if counts else "")
            + f"; counts with fewer than {MIN_STEPS_PER_COUNT} such steps take the general "
            "figure; the next training stage after a move pays the larger of it and the "
            "background work's contention"
        )


def first_steps_after_resize(steps: pd.DataFrame) -> np.ndarray:
    """Whether each step is the first training step after a resize (it carries a resize id)."""
    if "resize_id" not in steps:
        return np.zeros(len(steps), dtype=bool)
    trained = (steps["train_s"].to_numpy() > 0) & (steps["train_gpus"].to_numpy() > 0)
    return steps["resize_id"].notna().to_numpy() & trained


def fit_first_train_step(
    steps: pd.DataFrame, *, model: ModelConfig, train: TrainCostParams
) -> FirstStepFit:
    """The excess of the first training steps after resizes over the fitted train model."""
    rows = first_steps_after_resize(steps)
    trainers = steps["train_gpus"].to_numpy(np.int64)[rows]
    if not rows.any():
        return FirstStepFit(0.0, {}, np.zeros(0), trainers)
    predicted = train_predictions(
        steps["tokens"].to_numpy(np.float64)[rows], trainers, model, train
    )
    excess = np.maximum(steps["train_s"].to_numpy(np.float64)[rows] - predicted, 0.0)
    by_trainers = {
        int(n): float(np.median(excess[trainers == n]))
        for n in np.unique(trainers)
        if np.sum(trainers == n) >= MIN_STEPS_PER_COUNT
    }
    return FirstStepFit(float(np.median(excess)), by_trainers, excess, trainers)
