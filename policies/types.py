"""The contract between whoever runs a pipeline (the twin or the live executor) and a policy.

A policy sees only a `StepObservation` and answers with a `Decision`. Everything a policy could
want to predict (the step time on another split, the cost of getting there) is filled in by the
caller, so policies stay pure functions of what they observed plus their own small state. That is
what lets the very same object decide in the simulator and on real GPUs.
"""

from __future__ import annotations

from enum import Enum
from operator import attrgetter
from typing import Annotated, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .trusted import trusted_complete

MEASURED_COSTS_WINDOW = 64
"""Default of how many of the most recent measured costs an observation carries (resizes, and a
lending offer's switches): a caller keeps that many, not the whole run's, so a policy that
resizes at nearly every step does not make every observation copy all of them. Policies average
over a few (their `switch_cost_window_size`, 3 by default)."""


class Allocation(BaseModel):
    """How many GPUs each role holds. Written `train:rollout`, e.g. `6:2`."""

    model_config = ConfigDict(frozen=True)

    train_gpus: int = Field(ge=1, description="GPUs that run the Training role.")
    rollout_gpus: int = Field(ge=1, description="GPUs that run the Rollout role.")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: object) -> object:
        """Configs write allocations as text: every field of this type accepts `"6:2"`."""
        if isinstance(value, str):
            parsed = cls.parse(value)
            return {"train_gpus": parsed.train_gpus, "rollout_gpus": parsed.rollout_gpus}
        return value

    @property
    def total_gpus(self) -> int:
        return self.train_gpus + self.rollout_gpus

    @property
    def label(self) -> str:
        return f"{self.train_gpus}:{self.rollout_gpus}"

    @classmethod
    def parse(cls, text: str) -> Allocation:
        """Parse `"6:2"` (train:rollout). Raises ValueError naming the text on bad input."""
        parts = str(text).strip().split(":")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"allocation {text!r} is not of the form TRAIN:ROLLOUT, e.g. 6:2")
        return cls(train_gpus=int(parts[0]), rollout_gpus=int(parts[1]))

    def __str__(self) -> str:
        return self.label


class StageTimes(BaseModel):
    """Measured (or simulated) stage durations of one completed step."""

    model_config = ConfigDict(frozen=True)

    step: int = Field(ge=0, description="Index of the step these times belong to.")
    allocation: Allocation = Field(description="Allocation the step ran on.")
    rollout_s: float = Field(ge=0, description="Time the rollout stage of the step took.")
    train_s: float = Field(ge=0, description="Time the training stage of the step took.")
    sync_s: float = Field(ge=0, description="Time the trainer-to-rollout weight sync took.")
    step_s: float = Field(ge=0, description="Wall (or simulated) time of the whole step.")
    wait_s: float | None = Field(
        default=None,
        ge=0,
        description="Time training waited for samples on the Rollout GPUs alone, lent replicas' "
        "help excluded (None: not measured; rules then take rollout_s - train_s).",
    )
    waited_fraction: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Share of the batch not yet generated when that wait began (None: not "
        "measured; rules then take 1 - train_s / rollout_s).",
    )
    lent: bool = Field(
        default=False, description="Whether the trainers' GPUs were lent to Rollout in the step."
    )


class CostSource(str, Enum):
    """Where a predicted resize cost came from, so that a decision record can say so."""

    MODEL = "model"
    """The twin's cost model with its default or preset parameters."""
    CALIBRATED = "calibrated"
    """The twin's cost model with parameters fitted to measurements (`--costs`)."""
    MEASURED = "measured"
    """A rolling window over resizes this run has measured itself."""


class CandidatePrediction(BaseModel):
    """The caller's prediction for moving to (or staying on) one candidate allocation."""

    model_config = ConfigDict(frozen=True)

    allocation: Allocation = Field(description="The candidate allocation.")
    predicted_step_s: float = Field(
        ge=0, description="Predicted steady-state step time on this allocation."
    )
    predicted_resize_critical_s: float = Field(
        ge=0,
        description="Predicted time the pipeline stalls to move from the current allocation "
        "to this one (0 for the current allocation).",
    )
    predicted_resize_background_s: float = Field(
        default=0.0,
        ge=0,
        description="Predicted slowdown of the first step after the move caused by work "
        "overlapped with it (0 for the current allocation).",
    )
    cost_source: CostSource = Field(
        default=CostSource.MODEL, description="Where the predicted resize cost came from."
    )

    @property
    def predicted_resize_total_s(self) -> float:
        return self.predicted_resize_critical_s + self.predicted_resize_background_s


class LendingOffer(BaseModel):
    """What lending the trainers' GPUs within a step would give, filled in by a caller whose
    pipeline can lend (the twin with `pipeline.lending`); absent elsewhere.

    The trainers' GPUs hold sleeping rollout replicas. Lent, they are activated (wake plus
    weight load) when training would wait for rollout, serve the batch's remaining requests
    beside the Rollout GPUs' replicas, and are deactivated (their in-flight requests resumed
    elsewhere) before the next training stage. The allocation never changes.
    """

    model_config = ConfigDict(frozen=True)

    lent_replicas: int = Field(ge=0, description="Rollout replicas the trainers' GPUs would add.")
    rollout_replicas: int = Field(ge=1, description="Replicas on the Rollout GPUs.")
    samples_per_step: int = Field(ge=1, description="Samples one training step consumes.")
    ready_fraction: float = Field(
        ge=0,
        description="Samples of the next batch(es) already generated when training would start "
        "waiting, as a share of one step's batch (above 1: more than a batch is buffered).",
    )
    predicted_wait_s: float = Field(
        ge=0, description="Predicted wait of training for the next batch without lending."
    )
    predicted_saving_s: float = Field(
        description="Predicted wait saved by lending until the batch is ready, switch costs "
        "included (negative: lending would cost more than it saves)."
    )
    predicted_activate_s: float = Field(ge=0, description="Predicted activate phase (s).")
    predicted_deactivate_s: float = Field(ge=0, description="Predicted deactivate phase (s).")
    measured_activate_s: tuple[Annotated[float, Field(ge=0)], ...] = Field(
        default=(),
        description="Activate phases measured so far, oldest first: the most recent ones, as "
        "many as the caller's window keeps (64 by default).",
    )
    measured_deactivate_s: tuple[Annotated[float, Field(ge=0)], ...] = Field(
        default=(),
        description="Deactivate phases measured so far, oldest first: the most recent ones, as "
        "many as the caller's window keeps (64 by default).",
    )
    measured_cycles_s: tuple[Annotated[float, Field(ge=0)], ...] = Field(
        default=(),
        description="Switch seconds of each step that switched, oldest first: the deactivate "
        "before its training plus the activate after its weight sync (veRL's accounting); the "
        "most recent ones, as many as the caller's window keeps (64 by default).",
    )

    @property
    def predicted_switch_s(self) -> float:
        """One lend: an activate and a deactivate."""
        return self.predicted_activate_s + self.predicted_deactivate_s


class StepObservation(BaseModel):
    """What a policy sees at a step boundary, after step `step` has completed."""

    model_config = ConfigDict(frozen=True)

    step: int = Field(ge=0, description="Index of the step that just completed.")
    now_s: float = Field(ge=0, description="Clock at the boundary (SimPy time or wall time).")
    allocation: Allocation = Field(description="The allocation the pipeline runs on now.")
    recent: tuple[StageTimes, ...] = Field(
        description="Stage times of recent steps, oldest first, the just-completed step last."
    )
    candidates: tuple[CandidatePrediction, ...] = Field(
        description="One prediction per candidate allocation, the current one included."
    )
    steps_since_resize: int | None = Field(
        default=None,
        ge=0,
        description="Completed steps since the last resize took effect; None if none yet.",
    )
    remaining_steps: int | None = Field(
        default=None, ge=0, description="Steps left in the run, when the caller knows it."
    )
    measured_resize_costs_s: tuple[Annotated[float, Field(ge=0)], ...] = Field(
        default=(),
        description="Critical-path costs of the resizes this run has measured, oldest first: "
        "the most recent ones, as many as the caller's window keeps (the twin's "
        "simulation.measured_resize_costs_window, the live run's measured_resize_costs_window; "
        "64 by default); empty until one has happened, or when the caller measures none.",
    )

    lending: LendingOffer | None = Field(
        default=None,
        description="What lending the trainers' GPUs within the next step would give; None "
        "where the pipeline cannot lend.",
    )

    @model_validator(mode="after")
    def _current_is_a_candidate(self) -> StepObservation:
        if self.candidates and self.allocation not in {c.allocation for c in self.candidates}:
            raise ValueError(f"current allocation {self.allocation} is not among the candidates")
        if not self.recent:
            raise ValueError("an observation needs at least the just-completed step in `recent`")
        return self

    @property
    def last(self) -> StageTimes:
        return self.recent[-1]

    def candidate(self, allocation: Allocation) -> CandidatePrediction:
        # `is` first: a caller hands the same allocation objects back, and pydantic's equality
        # costs more than the rest of the look-up (an allocation equals itself).
        for c in self.candidates:
            if c.allocation is allocation or c.allocation == allocation:
                return c
        raise KeyError(f"{allocation} is not a candidate")

    def candidate_allocations(self) -> list[Allocation]:
        """Candidates ordered from most training GPUs to fewest (stable: equal ones as given)."""
        return sorted((c.allocation for c in self.candidates), key=_train_gpus, reverse=True)


_train_gpus = attrgetter("train_gpus")
_HOLD_FIELDS_SET = {"kind", "reason"}
"""What a validated `Decision.hold(reason)` counts as given, shared by every such decision."""
_RESIZE_FIELDS_SET = {"kind", "target", "reason"}
"""What a validated `Decision.resize(target, reason)` counts as given, likewise."""


class DecisionKind(str, Enum):
    HOLD = "hold"
    RESIZE = "resize"


_HOLD = DecisionKind.HOLD
_RESIZE = DecisionKind.RESIZE
"""The kinds as module constants: a member read from the enum class costs several times a
global's read, and decisions are made at every step boundary."""


class LendAction(BaseModel):
    """Lend the trainers' GPUs to Rollout during the next wait of training, within the step."""

    model_config = ConfigDict(frozen=True)

    until_ready_fraction: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="Share of the awaited batch generated when the lent replicas are "
        "deactivated (1: the whole batch; veRL's deactivate threshold).",
    )


class Decision(BaseModel):
    """A policy's answer: keep the allocation, or move to `target`, with a reason for the record;
    and, where the observation offers it, whether to lend the trainers' GPUs within the next
    step."""

    model_config = ConfigDict(frozen=True)

    kind: DecisionKind = Field(description="Hold the current allocation or resize.")
    target: Allocation | None = Field(
        default=None, description="The allocation to move to; set exactly when resizing."
    )
    reason: str = Field(default="", description="Human-readable why, kept in the records.")
    lend: LendAction | None = Field(
        default=None,
        description="Lend the trainers' GPUs during the next wait (only where the observation "
        "carries a lending offer); None: do not lend.",
    )

    @model_validator(mode="after")
    def _target_iff_resize(self) -> Decision:
        if (self.kind is DecisionKind.RESIZE) != (self.target is not None):
            raise ValueError("a resize decision needs a target and a hold decision has none")
        return self

    @classmethod
    def hold(cls, reason: str = "", *, lend: LendAction | None = None) -> Decision:
        if lend is None and type(reason) is str:
            # The common answer, valid by construction: built as validation would build it
            # (a policy answers at every step boundary of every run of a sweep).
            values = {"kind": _HOLD, "target": None, "reason": reason, "lend": None}
            return trusted_complete(cls, values, _HOLD_FIELDS_SET)
        return cls(kind=DecisionKind.HOLD, reason=reason, lend=lend)

    @classmethod
    def resize(
        cls, target: Allocation, reason: str = "", *, lend: LendAction | None = None
    ) -> Decision:
        if lend is None and type(target) is Allocation and type(reason) is str:
            # Valid by construction, as `hold`: validation would keep the allocation instance
            # as given and check only that a resize has a target, which it has.
            values = {"kind": _RESIZE, "target": target, "reason": reason, "lend": None}
            return trusted_complete(cls, values, _RESIZE_FIELDS_SET)
        if lend is None:
            return cls(kind=DecisionKind.RESIZE, target=target, reason=reason)
        return cls(kind=DecisionKind.RESIZE, target=target, reason=reason, lend=lend)

    def with_lend(self, lend: LendAction | None, why: str) -> Decision:
        """The same decision, lending as given, its reason extended by why."""
        reason = f"{self.reason}; {why}" if self.reason else why
        return self.model_copy(update={"lend": lend, "reason": reason})

    @property
    def is_resize(self) -> bool:
        return self.kind is _RESIZE


@runtime_checkable
class Policy(Protocol):
    """A stateful decider. `reset()` returns it to the state it had when built."""

    def decide(self, obs: StepObservation) -> Decision: ...

    def reset(self) -> None: ...
