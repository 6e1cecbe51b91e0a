"""`scheduled`: resize to given allocations after given steps.

For tests, for replaying the resizes of a recorded run, and for live demonstrations where the
moment of a resize must be known in advance.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .base import PolicyConfigBase
from .types import Allocation, Decision, StepObservation


class ScheduleEntry(BaseModel):
    """One planned resize: at the boundary after step `step`, move to `allocation`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int = Field(ge=0, description="Resize at the boundary after this step completes.")
    allocation: Allocation = Field(description="Target allocation as TRAIN:ROLLOUT, e.g. 4:4.")


def parse_compact_schedule(text: str) -> list[dict[str, str]]:
    """`"10@4:4;30@6:2"` -> entries. The compact form fits a one-line CLI policy spec."""
    entries = []
    for item in (part.strip() for part in text.split(";")):
        if not item:
            continue
        step, sep, allocation = item.partition("@")
        if not sep:
            raise ValueError(f"schedule entry {item!r} is not of the form STEP@TRAIN:ROLLOUT")
        entries.append({"step": step.strip(), "allocation": allocation.strip()})
    return entries


class ScheduledConfig(PolicyConfigBase):
    """Resize exactly at the listed steps, to the listed allocations; hold otherwise."""

    kind: Literal["scheduled"] = Field(
        default="scheduled", description="Selects the scheduled policy."
    )
    schedule: tuple[ScheduleEntry, ...] = Field(
        description="Planned resizes as a list of {step, allocation}; in a one-line spec "
        "also 'STEP@TRAIN:ROLLOUT;STEP@TRAIN:ROLLOUT'. Steps must be distinct.",
    )

    @field_validator("schedule", mode="before")
    @classmethod
    def _accept_compact_form(cls, value: Any) -> Any:
        return parse_compact_schedule(value) if isinstance(value, str) else value

    @field_validator("schedule")
    @classmethod
    def _distinct_steps(cls, value: tuple[ScheduleEntry, ...]) -> tuple[ScheduleEntry, ...]:
        steps = [e.step for e in value]
        duplicates = sorted({s for s in steps if steps.count(s) > 1})
        if duplicates:
            raise ValueError(f"schedule lists step(s) {duplicates} more than once")
        return tuple(sorted(value, key=lambda e: e.step))

    def build(self) -> ScheduledPolicy:
        return ScheduledPolicy(self)


class ScheduledPolicy:
    """Looks the completed step up in the schedule. Stateless apart from its config."""

    def __init__(self, config: ScheduledConfig) -> None:
        self.config = config
        self._by_step = {e.step: e for e in config.schedule}

    def decide(self, obs: StepObservation) -> Decision:
        entry = self._by_step.get(obs.step)
        if entry is None:
            return Decision.hold("no resize scheduled")
        if obs.candidates and entry.allocation not in {c.allocation for c in obs.candidates}:
            offered = ", ".join(a.label for a in obs.candidate_allocations())
            raise ValueError(
                f"scheduled.schedule: allocation {entry.allocation} at step {entry.step} is not "
                f"among the candidates ({offered})"
            )
        if entry.allocation == obs.allocation:
            return Decision.hold(f"scheduled allocation {entry.allocation} already in place")
        return Decision.resize(entry.allocation, f"scheduled after step {entry.step}")

    def reset(self) -> None:
        return None
