"""Resize policies and the contract they decide on.

What it is for: `StepObservation` in, `Decision` out. The twin and the live executor call the
very same policy objects, so this package imports nothing else of the project (only pydantic and
the standard library). Every policy is a pydantic config whose `kind` field picks the class, plus a
small stateful object with `decide(obs)` and `reset()`.
"""

from .types import (
    Allocation,
    CandidatePrediction,
    CostSource,
    Decision,
    DecisionKind,
    Policy,
    StageTimes,
    StepObservation,
)

__all__ = [
    "Allocation",
    "CandidatePrediction",
    "CostSource",
    "Decision",
    "DecisionKind",
    "Policy",
    "StageTimes",
    "StepObservation",
]
