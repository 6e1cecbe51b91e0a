"""The state and records of one SimPy pipeline run: step costs, the current split, the policy
call at each step boundary (observation, decision, record) and a resize's stall.

The modes' SimPy processes (twin/pipeline.py) drive it; this part is what every mode shares,
and the per-step hot path: it runs once per step boundary, so it reads precomputed lists and
templates rather than building the same objects again at every step.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from dynaresize.policies.trusted import set_dict, set_extra, set_fields_set, set_private
from dynaresize.policies.types import (
    Allocation,
    CandidatePrediction,
    Decision,
    DecisionKind,
    LendingOffer,
    StageTimes,
    StepObservation,
)
from dynaresize.traces.phases import Role

from ._lazy import LazyModule
from .costs.resize import ResizePlan
from .decision_log import DecisionLog
from .pipeline_run import DECISION_FIELDS, Clock, PipelineRecords, PipelineRun
from .resize_log import RESIZE_FIELDS, PhaseRow, ResizeLog

__all__ = ["Clock", "PipelineCore"]

_new = object.__new__
_RESIZE = DecisionKind.RESIZE


if TYPE_CHECKING:
    import simpy
else:
    simpy = LazyModule("simpy")


class _PendingResize(NamedTuple):
    """A resize's effect on the next training stage: a tuple, as a policy that resizes at every
    step makes one per step (a dataclass's `__init__` costs several times a tuple's)."""

    resize_id: int
    floor_s: float
    """The next training stage cannot end earlier than this after it starts."""
    slowdown_s: float


class PipelineCore:
    """What every pipeline mode shares; the modes' processes live in a subclass."""

    def __init__(self, run: PipelineRun, clock: Clock | None = None) -> None:
        costs, cost_source = run.costs, run.cost_source
        if clock is None:
            self.env = simpy.Environment()
            """SimPy's event queue, for the modes whose processes interleave."""
            clock = self.env
        self.clock: Clock = clock
        """What the shared stages wait on: SimPy's environment, or a `StepClock` standing in
        for it where one process runs alone (a lockstep run then never imports SimPy)."""
        self.costs = costs
        self.policy = run.policy
        self.policy_name = run.policy_name
        self.pipeline = run.pipeline
        self.current = costs.index(run.initial)
        self.plans = run.plans
        self.recent: deque[StageTimes] = deque(maxlen=run.observation_window_steps)
        self.cost_source = cost_source
        self.last_decision: Decision | None = None
        self.can_lend = False
        """Whether observations offer lending (a pipeline that lends sets it)."""
        self.records = PipelineRecords()
        self.num_steps = costs.num_steps
        # Per-step values as preallocated Python lists (cheap to write one at a time); `finish`
        # turns them into the step table's columns in one pass.
        self.batch_rollout_s = [0.0] * self.num_steps
        self.batch_version = [0] * self.num_steps
        self.step_start = [0.0] * self.num_steps
        self.step_end = [0.0] * self.num_steps
        self.step_train_s = [0.0] * self.num_steps
        self.step_allocation = [0] * self.num_steps
        self.step_resize_id: list[int | None] = [None] * self.num_steps
        self.pending: _PendingResize | None = None
        self.num_resizes = 0
        self.last_resize_step: int | None = None
        self.measured_resize_s: deque[float] = deque(maxlen=run.measured_costs_window)
        """The most recent measured resize costs, oldest first (bounded, however often the
        policy resizes), kept as the live observer keeps them."""
        self.measured_resize_costs_s: tuple[float, ...] = ()
        """The observation's field as it stands: a copy of `measured_resize_s` made at each
        resize, not at each step."""
        self.step_start_s = 0.0
        self.roles = [
            [Role.TRAIN.value] * a.train_gpus + [Role.ROLLOUT.value] * a.rollout_gpus
            for a in costs.candidates
        ]
        # Plain Python lists, one per split (`[split][step]`), read millions of times: a list
        # index is several times cheaper than a numpy scalar read plus float().
        self.rollout_s_on = [c.tolist() for c in costs.rollout_s.T]
        self.train_s_on = [c.tolist() for c in costs.train_s.T]
        self.sync_s = costs.sync_s.tolist()
        self.predicted_s_on = [c.tolist() for c in run.predicted_step_s.T]
        self.labels = [a.label for a in costs.candidates]
        self.cost_source_value = cost_source.value
        self.prediction_fields = set(CandidatePrediction.model_fields)
        """Every field of a prediction is given: one set for all of them (they are frozen)."""
        self.stage_times_fields = set(StageTimes.model_fields)
        self.observation_fields = set(StepObservation.model_fields)
        """Every field of an observation is given (`_observe`): one set for all of them."""
        self.observation_defaults: dict[str, Any] | None = None
        """Defaults of the fields `_observe` leaves out (none today), found at its first call."""
        self.candidates = costs.candidates
        """The candidate splits, by index (read at every step)."""
        self.plan_table: list[list[ResizePlan | None]] = [
            [
                None if cand == current else self.plans.between(current, cand)
                for cand in costs.candidates
            ]
            for current in costs.candidates
        ]
        """The plan of each move, by (current, target) index: looked up twice per resize, once
        built (None from a split to itself)."""
        # Every field of each candidate's prediction, for each current split (outer index) and
        # candidate (inner index), in the order of a validated prediction's fields but the
        # predicted step time, which comes last, read from the candidate's list: staying costs
        # nothing, a move costs its kind's plan.
        self.prediction_rows = [
            [
                (
                    cand,
                    plan.critical_s if plan else 0.0,
                    plan.slowdown_s if plan else 0.0,
                    cost_source,
                    predicted_s,
                )
                for cand, plan, predicted_s in zip(
                    costs.candidates, plans_from, self.predicted_s_on, strict=True
                )
            ]
            for plans_from in self.plan_table
        ]
        self.index_of = {(a.train_gpus, a.rollout_gpus): i for i, a in enumerate(costs.candidates)}
        """Candidate index by (train, rollout) GPUs: a dict look-up, not pydantic equality."""
        self.resize_log = ResizeLog(first_only=not run.phase_rows)
        """One entry per resize; its phase rows, in RESIZE_FIELDS order, as columns at `finish`."""
        self.decision_log = DecisionLog()
        """One entry per policy call, as the decisions table's columns at `finish`."""

    # -- shared pieces ---------------------------------------------------------------------

    def _train_duration_s(self, k: int) -> tuple[float, int | None]:
        """Training stage of step k on the current split, with a pending resize's effect."""
        base_s = self.train_s_on[self.current][k]
        pending, self.pending = self.pending, None
        if pending is None:
            return base_s, None
        return max(base_s + pending.slowdown_s, pending.floor_s), pending.resize_id

    def _rollout(self, batch: int, version: int):
        """Generate one batch on the current split (a SimPy sub-process body)."""
        duration_s = self.rollout_s_on[self.current][batch]
        start_s = self.clock.now
        yield self.clock.timeout(duration_s)
        self._rolled_out(batch, version, start_s, duration_s)

    def _rolled_out(self, batch: int, version: int, start_s: float, duration_s: float) -> None:
        """The records of a batch generated from `start_s` for `duration_s`."""
        self.records.rollout_intervals.add(start_s, start_s + duration_s)
        self.batch_rollout_s[batch] = duration_s
        self.batch_version[batch] = version

    def _train_and_sync(self, train_s: float, *, one_event: bool):
        """Training then weight sync, one busy span of the training GPUs.

        With `one_event` (the lockstep modes, where no other process runs) it is one SimPy
        event; in async mode the sync's start stays an event of its own, so that events of the
        rollout process at the same instant keep their order.
        """
        start_s = self.clock.now
        sync_s = self.sync_s[self.current]
        if one_event:
            yield self.clock.timeout(train_s + sync_s)
        else:
            yield self.clock.timeout(train_s)
            yield self.clock.timeout(sync_s)
        self.records.train_intervals.add(start_s, self.clock.now)

    def _record_step(
        self,
        k: int,
        train_s: float,
        resize_id: int | None,
        *,
        wait_s: float | None = None,
        waited_fraction: float | None = None,
        lent: bool = False,
    ) -> None:
        now, current, start_s = self.clock.now, self.current, self.step_start_s
        self.step_start[k] = start_s
        self.step_end[k] = now
        self.step_train_s[k] = train_s
        self.step_allocation[k] = current
        self.step_resize_id[k] = resize_id
        # `trusted_complete` written out in place, as in `_observe`.
        times = _new(StageTimes)
        set_dict(
            times,
            {
                "step": k,
                "allocation": self.candidates[current],
                "rollout_s": self.batch_rollout_s[k],
                "train_s": train_s,
                "sync_s": self.sync_s[current],
                "step_s": now - start_s,
                "wait_s": wait_s,
                "waited_fraction": waited_fraction,
                "lent": lent,
            },
        )
        set_fields_set(times, self.stage_times_fields)
        set_extra(times, None)
        set_private(times, None)
        self.recent.append(times)

    _record = _record_step
    """Step k's records (a pipeline that follows samples adds how training waited)."""

    def finish(self) -> PipelineRecords:
        """Assemble the step columns from the per-step arrays (one pass, no per-row objects)."""
        n = self.num_steps
        alloc = np.array(self.step_allocation, dtype=np.int64)
        start_s = np.array(self.step_start, dtype=np.float64)
        end_s = np.array(self.step_end, dtype=np.float64)
        train_gpus = np.array([a.train_gpus for a in self.costs.candidates], dtype=np.int64)
        rollout_gpus = np.array([a.rollout_gpus for a in self.costs.candidates], dtype=np.int64)
        self.records.steps = {
            "step": np.arange(n, dtype=np.int64),
            "start_s": start_s,
            "end_s": end_s,
            "rollout_s": np.array(self.batch_rollout_s, dtype=np.float64),
            "train_s": np.array(self.step_train_s, dtype=np.float64),
            "sync_s": self.costs.sync_s[alloc],
            "step_s": end_s - start_s,
            "train_gpus": train_gpus[alloc],
            "rollout_gpus": rollout_gpus[alloc],
            "device_roles": [self.roles[i] for i in self.step_allocation],
            "resize_id": self.step_resize_id,
            "rollout_batch_id": np.arange(n, dtype=np.int64),
            "rollout_weights_version": np.array(self.batch_version, dtype=np.int64),
        }
        self.records.decisions = self.decision_log.columns(
            DECISION_FIELDS,
            policy=self.policy_name,
            labels=self.labels,
            cost_source=self.cost_source_value,
            plans=self.plan_table,
        )
        self.decision_log = DecisionLog()  # the columns hold the calls now
        self.records.resizes = self.resize_log.columns(RESIZE_FIELDS)
        return self.records

    def _observe(self, k: int) -> StepObservation:
        # The hot path: each prediction and the observation are `trusted_complete` written out
        # in place (one call fewer per object per step), a prediction's dict built whole from
        # its row (the key order a copy of a template plus the step time would give).
        fields = self.prediction_fields
        candidates = []
        for allocation, critical_s, background_s, source, predicted_s in self.prediction_rows[
            self.current
        ]:
            obj = _new(CandidatePrediction)
            set_dict(
                obj,
                {
                    "allocation": allocation,
                    "predicted_resize_critical_s": critical_s,
                    "predicted_resize_background_s": background_s,
                    "cost_source": source,
                    "predicted_step_s": predicted_s[k],
                },
            )
            set_fields_set(obj, fields)
            set_extra(obj, None)
            set_private(obj, None)
            candidates.append(obj)
        since = None if self.last_resize_step is None else k - self.last_resize_step
        values = {
            "step": k,
            "now_s": self.clock.now,
            "allocation": self.candidates[self.current],
            "recent": tuple(self.recent),
            "candidates": tuple(candidates),
            "steps_since_resize": since,
            "remaining_steps": self.num_steps - k - 1,
            "measured_resize_costs_s": self.measured_resize_costs_s,
            "lending": self._lending_offer(k) if self.can_lend else None,
        }
        if self.observation_defaults is None:
            model_fields = StepObservation.model_fields
            self.observation_defaults = {
                name: model_fields[name].get_default(call_default_factory=True)
                for name in model_fields.keys() - values.keys()
            }
        if self.observation_defaults:
            values.update(self.observation_defaults)
        obs = _new(StepObservation)
        set_dict(obs, values)
        set_fields_set(obs, self.observation_fields)
        set_extra(obs, None)
        set_private(obs, None)
        return obs

    def _lending_offer(self, k: int) -> LendingOffer | None:
        """What lending would give in the next step (a pipeline that lends says)."""
        return None

    def _decide(self, k: int) -> int | None:
        """Ask the policy at the boundary after step k; the target's index, or None to hold."""
        obs = self._observe(k)
        decision: Decision = self.policy.decide(obs)
        self.last_decision = decision
        target = None
        if decision.kind is _RESIZE:  # `is_resize`, without the property's call
            target = self._index(decision.target)  # type: ignore[arg-type]
            if target == self.current:
                target = None
        log = self.decision_log
        log.steps.append(k)
        log.times_s.append(self.clock.now)
        log.splits.append(self.current)
        log.targets.append(-1 if target is None else target)
        log.reasons.append(decision.reason)
        return target

    def _index(self, allocation: Allocation) -> int:
        """The candidate index of `allocation` (KeyError if it is none of them)."""
        if type(allocation) is Allocation:
            index = self.index_of.get((allocation.train_gpus, allocation.rollout_gpus))
            if index is not None:
                return index
        return self.costs.index(allocation)

    def _plan_to(self, target: int) -> ResizePlan:
        plan = self.plan_table[self.current][target]
        if plan is None:  # a move to the current split itself: no plan is kept for it
            candidates = self.costs.candidates
            return self.plans.between(candidates[self.current], candidates[target])
        return plan

    def _plan_rows(self, target: int) -> tuple[list[PhaseRow], tuple[str, str, str]]:
        """The phases of the plan from the current split to `target` as plain tuples, and its
        strategy and the two splits' labels."""
        plan = self._plan_to(target)
        rows = [(p.name.value, p.start_s, p.end_s, p.critical, p.bytes_moved) for p in plan.phases]
        return rows, (plan.strategy.value, self.labels[self.current], self.labels[target])

    def _resize(self, k: int, target: int, drain_s: float | None):
        """Stall for the critical path (after a drain, in async mode) and switch the split."""
        stall_s, plan, resize_id = self._start_resize(k, target, drain_s)
        yield self.clock.timeout(stall_s)
        self._end_resize(k, target, stall_s, plan, resize_id)

    def _start_resize(
        self, k: int, target: int, drain_s: float | None
    ) -> tuple[float, ResizePlan, int]:
        """A resize's record as it starts: its stall, plan and id."""
        resize_id = self.num_resizes
        self.num_resizes += 1
        start_s = self.clock.now
        plan = self._plan_to(target)
        self.resize_log.add(
            k,
            (self.current, target),
            lambda: self._plan_rows(target),
            start_s=start_s,
            drain_s=drain_s,
        )
        offset_s = start_s if drain_s is None else start_s + drain_s
        return (offset_s - start_s) + plan.critical_s, plan, resize_id

    def _end_resize(
        self, k: int, target: int, stall_s: float, plan: ResizePlan, resize_id: int
    ) -> None:
        """Once the stall is over: the split switched, the background phases pending."""
        self.records.stall_s += stall_s
        self.measured_resize_s.append(stall_s)
        self.measured_resize_costs_s = tuple(self.measured_resize_s)
        self.current = target
        self.last_resize_step = k
        self.pending = _PendingResize(resize_id, plan.background_tail_s, plan.slowdown_s)
