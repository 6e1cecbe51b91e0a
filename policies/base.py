"""What every policy config shares: strict fields, immutability and a `build()` method.

Configs are pydantic models so that a typo in a YAML file or a CLI spec fails when the config is
built, with an error naming the field, instead of silently running a different policy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from pydantic import BaseModel, ConfigDict, Field

from .types import Policy


class PolicyConfigBase(BaseModel, ABC):
    """Base of every policy config. Subclasses add a `kind: Literal[...]` field and their knobs."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)

    kind: str = Field(description="The policy this config builds; each subclass fixes it.")

    @abstractmethod
    def build(self) -> Policy:
        """A fresh policy object in its initial state."""
