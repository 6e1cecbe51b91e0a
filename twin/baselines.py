"""Static baselines: every candidate split held for the whole run, and the best of them.

Read straight off the step-time matrix (a static run's total is the column sum, exactly what the
SimPy pipeline produces for a `static` policy on that split), so comparing a policy with every
static split costs no extra simulation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ._lazy import LazyModule
from .step_costs import StepCosts

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = LazyModule("pandas")


@dataclass(frozen=True)
class StaticBaselines:
    """Totals and utilisation of each static split, in candidate order."""

    table: pd.DataFrame
    """One row per split: allocation, total_s, steps_per_hour, tokens_per_s, gpu_idle_fraction."""

    @property
    def totals_s(self) -> dict[str, float]:
        # As lists: iterating the columns themselves goes through pandas value by value.
        table = self.table
        return dict(zip(table["allocation"].tolist(), table["total_s"].tolist(), strict=True))

    @property
    def best_allocation(self) -> str:
        return str(self.table.loc[self.table["total_s"].idxmin(), "allocation"])

    @property
    def best_total_s(self) -> float:
        return float(self.table["total_s"].min())


def static_baselines(costs: StepCosts, tokens_per_step: np.ndarray) -> StaticBaselines:
    """Every static split's figures from the matrices.

    GPU idle share: training GPUs are busy while training and syncing, rollout GPUs while
    generating; the rest of each GPU's time in the run is idle.
    """
    totals = costs.static_totals_s()
    train = np.array([c.train_gpus for c in costs.candidates], dtype=float)
    rollout = np.array([c.rollout_gpus for c in costs.candidates], dtype=float)
    busy_train = (costs.train_s.sum(axis=0) + costs.num_steps * costs.sync_s) * train
    busy_rollout = costs.rollout_s.sum(axis=0) * rollout
    gpu_s = (train + rollout) * totals
    with np.errstate(divide="ignore", invalid="ignore"):
        idle = np.where(gpu_s > 0, 1.0 - (busy_train + busy_rollout) / gpu_s, 0.0)
        per_hour = np.where(totals > 0, 3600.0 * costs.num_steps / totals, 0.0)
        tokens_s = np.where(totals > 0, float(tokens_per_step.sum()) / totals, 0.0)
    table = pd.DataFrame(
        {
            "allocation": [c.label for c in costs.candidates],
            "total_s": totals,
            "steps_per_hour": per_hour,
            "tokens_per_s": tokens_s,
            "gpu_idle_fraction": np.clip(idle, 0.0, 1.0),
        }
    )
    return StaticBaselines(table)
