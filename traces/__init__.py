"""The record format both the twin and the live executor write, and everything that reads it.

What it is for: trace schema v1 (steps, resize phases, decisions), Parquet and JSONL reading and
writing with validation, importers for logs users already have (verl first), synthetic long-tail
workloads, and the `Workload` type the twin consumes. It imports nothing else of the project.
"""

from .phases import PhaseName, Role, StrategyName
from .schema import SCHEMA_VERSION, DecisionRecord, ResizePhaseRecord, StepRecord
from .workload import Workload

__all__ = [
    "SCHEMA_VERSION",
    "DecisionRecord",
    "PhaseName",
    "ResizePhaseRecord",
    "Role",
    "StepRecord",
    "StrategyName",
    "Workload",
]
