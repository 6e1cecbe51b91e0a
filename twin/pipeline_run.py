"""What one run of the SimPy pipeline reads (`PipelineRun`) and what it fills (`PipelineRecords`).

Kept apart from the pipeline itself so that the keywords of a run are written once, and so that
the pipeline that follows batches sample by sample (sample_pipeline.py) shares them.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from dynaresize.policies.types import MEASURED_COSTS_WINDOW, Allocation, CostSource, Policy

from .config import PipelineConfig
from .costs.resize import ResizePlans
from .step_costs import StepCosts

if TYPE_CHECKING:
    from .sample_pipeline import SampleInputs

__all__ = ["DECISION_FIELDS", "Clock", "Intervals", "PipelineRecords", "PipelineRun"]

DECISION_FIELDS = (
    "step",
    "time_s",
    "policy",
    "decision",
    "from_allocation",
    "to_allocation",
    "reason",
    "cost_source",
    "predicted_resize_critical_s",
    "resize_id",
)


class Clock(Protocol):
    """What the stages shared by every mode read of a simulated clock: the time, and a wait
    to yield. SimPy's environment is one; `pipeline.StepClock` another."""

    @property
    def now(self) -> float: ...

    def timeout(self, delay: float) -> Any: ...


@dataclass(frozen=True)
class PipelineRun:
    """Everything one run of the pipeline reads: one policy over every step of `costs`."""

    costs: StepCosts
    policy: Policy
    policy_name: str
    pipeline: PipelineConfig
    initial: Allocation
    plans: ResizePlans
    predicted_step_s: np.ndarray
    observation_window_steps: int
    cost_source: CostSource
    measured_costs_window: int = MEASURED_COSTS_WINDOW
    """Most recent measured resize (and lend switch) costs an observation carries."""
    samples: SampleInputs | None = None
    """Per-sample inputs, given exactly when the pipeline lends or keeps partial rollouts
    (twin/sample_pipeline.py); None: whole batches, as the step-cost matrices price them."""
    phase_rows: bool = True
    """Record every phase of every resize; False: the first phase of each only."""


class Intervals:
    """Busy intervals, (start, end) in the order recorded, as two growing arrays of doubles:
    at a million steps a list of pairs would hold three million tuples and six million float
    objects (over 300 MB) until the step table is built."""

    __slots__ = ("ends_s", "starts_s")

    def __init__(self) -> None:
        self.starts_s = array("d")
        self.ends_s = array("d")

    def add(self, start_s: float, end_s: float) -> None:
        self.starts_s.append(start_s)
        self.ends_s.append(end_s)

    def __len__(self) -> int:
        return len(self.starts_s)

    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """Starts and ends as float64 arrays (views of the recorded values, not copies)."""
        return (
            np.frombuffer(self.starts_s, dtype=np.float64),
            np.frombuffer(self.ends_s, dtype=np.float64),
        )


@dataclass
class PipelineRecords:
    """Column lists of the three record tables, filled as the run goes."""

    steps: dict[str, np.ndarray | list] = field(default_factory=dict)
    """Filled once, at the end of the run: numeric columns as arrays, the rest as lists."""
    resizes: dict[str, Any] = field(default_factory=dict)
    """Resize phase columns (`resize_log.ResizeLog.columns`), filled at the end of the run."""
    decisions: dict[str, Any] = field(default_factory=dict)
    """Columns of the policy calls in DECISION_FIELDS order (`decision_log.DecisionLog`),
    filled at the end of the run."""
    rollout_intervals: Intervals = field(default_factory=Intervals)
    train_intervals: Intervals = field(default_factory=Intervals)
    stall_s: float = 0.0
    end_s: float = 0.0
    lending: dict[str, np.ndarray] | None = None
    """Per-step lending columns (lent_gpus, lend_start_s, ...) and the decisions' `lend`, where
    the pipeline could lend; None elsewhere."""
    samples: dict[str, np.ndarray] | None = None
    """Per-sample columns (finish_s, num_resumes) of a sample-level run; None elsewhere."""
