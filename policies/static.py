"""`static`: never resize. The baseline every other policy is compared against."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import PolicyConfigBase
from .types import Decision, StepObservation


class StaticConfig(PolicyConfigBase):
    """Keep the initial split for the whole run."""

    kind: Literal["static"] = Field(default="static", description="Selects the static policy.")

    def build(self) -> StaticPolicy:
        return StaticPolicy(self)


class StaticPolicy:
    """Holds at every boundary. Stateless, so `reset()` has nothing to do."""

    def __init__(self, config: StaticConfig) -> None:
        self.config = config

    def decide(self, obs: StepObservation) -> Decision:
        return Decision.hold("static split")

    def reset(self) -> None:
        return None
