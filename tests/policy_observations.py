"""Builders of policy observations straight from `policies.types`, and a tiny closed loop.

The closed loop stands in for a pipeline only as far as a policy can tell: it turns an
allocation into stage times with a given function, applies every resize at the next boundary
and counts steps since the last one. No twin is involved.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dynaresize.policies import (
    Allocation,
    CandidatePrediction,
    Decision,
    Policy,
    StageTimes,
    StepObservation,
)

EIGHT_GPU_SPLITS = ("7:1", "6:2", "5:3", "4:4", "3:5", "2:6")


def alloc(label: str) -> Allocation:
    return Allocation.parse(label)


def times_with_imbalance(imbalance: float, *, longer_s: float = 40.0) -> tuple[float, float]:
    """(rollout_s, train_s) whose signed imbalance is exactly `imbalance`."""
    if imbalance >= 0:
        return longer_s, longer_s * (1.0 - imbalance)
    return longer_s * (1.0 + imbalance), longer_s


def make_obs(
    *,
    step: int,
    allocation: Allocation | str,
    rollout_s: float,
    train_s: float,
    labels: Sequence[str] = EIGHT_GPU_SPLITS,
    predicted_step_s: dict[str, float] | None = None,
    resize_cost_s: float = 100.0,
    steps_since_resize: int | None = None,
    remaining_steps: int | None = None,
    measured_resize_costs_s: Sequence[float] = (),
) -> StepObservation:
    current = alloc(allocation) if isinstance(allocation, str) else allocation
    predicted = predicted_step_s or {}
    candidates = tuple(
        CandidatePrediction(
            allocation=alloc(label),
            predicted_step_s=predicted.get(label, max(rollout_s, train_s)),
            predicted_resize_critical_s=0.0 if alloc(label) == current else resize_cost_s,
        )
        for label in labels
    )
    times = StageTimes(
        step=step,
        allocation=current,
        rollout_s=rollout_s,
        train_s=train_s,
        sync_s=1.0,
        step_s=max(rollout_s, train_s) + 1.0,
    )
    return StepObservation(
        step=step,
        now_s=float(step) * 40.0,
        allocation=current,
        recent=(times,),
        candidates=candidates,
        steps_since_resize=steps_since_resize,
        remaining_steps=remaining_steps,
        measured_resize_costs_s=tuple(measured_resize_costs_s),
    )


StageModel = Callable[[int, Allocation], tuple[float, float]]
"""(step, allocation) -> (rollout_s, train_s) of that step."""


@dataclass
class LoopRecord:
    decisions: list[Decision] = field(default_factory=list)
    allocations: list[Allocation] = field(default_factory=list)
    """Allocation each step ran on."""

    @property
    def resize_steps(self) -> list[int]:
        return [i for i, d in enumerate(self.decisions) if d.is_resize]

    @property
    def targets(self) -> list[Allocation]:
        return [d.target for d in self.decisions if d.target is not None]


def run_closed_loop(
    policy: Policy,
    stage_model: StageModel,
    *,
    start: str,
    num_steps: int,
    labels: Sequence[str] = EIGHT_GPU_SPLITS,
    resize_cost_s: float = 100.0,
    total_steps: int | None = None,
) -> LoopRecord:
    """Step 0..num_steps-1; each resize takes effect for the next step. Predictions are exact."""
    record = LoopRecord()
    allocation = alloc(start)
    steps_since: int | None = None
    for step in range(num_steps):
        rollout_s, train_s = stage_model(step, allocation)
        predicted = {}
        for label in labels:
            r, t = stage_model(step, alloc(label))
            predicted[label] = max(r, t)
        steps_since = None if steps_since is None else steps_since + 1
        obs = make_obs(
            step=step,
            allocation=allocation,
            rollout_s=rollout_s,
            train_s=train_s,
            labels=labels,
            predicted_step_s=predicted,
            resize_cost_s=resize_cost_s,
            steps_since_resize=steps_since,
            remaining_steps=None if total_steps is None else total_steps - step - 1,
        )
        decision = policy.decide(obs)
        record.decisions.append(decision)
        record.allocations.append(allocation)
        if decision.is_resize:
            assert decision.target is not None
            allocation = decision.target
            steps_since = 0
    return record


def scaling_model(rollout_work: float, train_work: float) -> StageModel:
    """Stage times inversely proportional to each role's GPUs: a stationary workload."""

    def model(step: int, allocation: Allocation) -> tuple[float, float]:
        return rollout_work / allocation.rollout_gpus, train_work / allocation.train_gpus

    return model
