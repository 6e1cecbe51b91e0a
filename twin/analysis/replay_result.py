"""What a replay returns: one row per compared run (their labels and columns) and the runs
behind the rows. Apart from `replay.py` so that the files written from a result
(`replay_outputs.py`) need nothing of how it was built."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..calibration.fit import CostFit
from ..mechanisms import MechanismComparison
from ..optimal import OptimalSchedule
from ..run_facts import AssumedFact
from ..simulation import SimResult

RECORDED_MEASURED = "recorded (measured)"
RECORDED_PREDICTED = "recorded (twin)"
COLOCATED_MEASURED = "recorded colocated (measured)"
COLOCATED_PREDICTED = "recorded colocated (twin)"
OFFLINE_OPTIMUM = "offline optimum"

TABLE_COLUMNS = [
    "name",
    "kind",
    "total_s",
    "total_h",
    "speedup_vs_recorded",
    "regret_s",
    "regret_pct",
    "num_resizes",
    "thrash_count",
]


@dataclass(frozen=True)
class ReplayResult:
    table: pd.DataFrame
    """One row per compared run, columns TABLE_COLUMNS."""
    measured_steps: pd.DataFrame
    """The trace's steps table."""
    predicted_steps: pd.DataFrame
    """The recorded run as the twin predicts it: at least `step` and `step_s` per step."""
    predicted_total_s: float
    policies: dict[str, SimResult]
    """Each replayed policy's run; the first's `resizes` hold every phase, the others' one row
    per resize (its first phase)."""
    optimum: OptimalSchedule
    fit: CostFit | None
    notes: list[str] = field(default_factory=list)
    assumed: tuple[AssumedFact, ...] = ()
    """Facts the comparison depends on that nothing gave (printed first, in replay.json)."""
    warnings: tuple[str, ...] = ()
    """Costs used outside the range they were fitted on."""

    @property
    def measured_total_s(self) -> float:
        """The recorded run's measured total (the table's first row)."""
        return float(self.table["total_s"].iloc[0])

    recorded_decisions: pd.DataFrame = field(default_factory=pd.DataFrame)
    """The recorded run's controller decisions, where its log kept them."""
    optimal_schedule: pd.DataFrame = field(default_factory=pd.DataFrame)
    """The optimum's start and moves (`twin.optimal.schedule_table`)."""
    mechanisms: MechanismComparison | None = None
    """The mechanisms side by side on the recorded workload, when asked for."""

    @property
    def prediction_error(self) -> float:
        """Twin-predicted total of the recorded run over its measured total, minus 1."""
        return self.predicted_total_s / self.measured_total_s - 1.0

    @property
    def step_time_mape(self) -> float:
        """Mean absolute percentage error of the predicted step times, step by step."""
        measured = self.measured_steps["step_s"].to_numpy(np.float64)
        predicted = self.predicted_steps["step_s"].to_numpy(np.float64)
        ok = measured > 0
        return float(np.mean(np.abs(predicted[ok] / measured[ok] - 1.0))) if ok.any() else 0.0
