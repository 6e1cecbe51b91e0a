"""Resize policies and the contract they decide on.

What it is for: `StepObservation` in, `Decision` out. The twin and the live executor call the
very same policy objects, so this package imports nothing else of the project (only pydantic and
the standard library). Every policy is a pydantic config whose `kind` field picks the class, plus a
small stateful object with `decide(obs)` and `reset()`. `build_policy(cfg)` makes one from a
`PolicyConfig` (or a mapping of one); `parse_policy_spec("kind:key=value,...")` reads the CLI form.
"""

from .registry import (
    POLICY_CONFIG_CLASSES,
    PolicyConfig,
    build_policy,
    parse_policy_config,
    parse_policy_spec,
    policy_kinds,
)
from .types import (
    Allocation,
    CandidatePrediction,
    CostSource,
    Decision,
    DecisionKind,
    LendAction,
    LendingOffer,
    Policy,
    StageTimes,
    StepObservation,
)

__all__ = [
    "POLICY_CONFIG_CLASSES",
    "Allocation",
    "CandidatePrediction",
    "CostSource",
    "Decision",
    "DecisionKind",
    "LendAction",
    "LendingOffer",
    "Policy",
    "PolicyConfig",
    "StageTimes",
    "StepObservation",
    "build_policy",
    "parse_policy_config",
    "parse_policy_spec",
    "policy_kinds",
]
