"""The SimPy pipeline: stages, step boundaries, policy calls and resizes, on a simulated clock.

SimPy carries only stage-level events (a rollout, a training stage, a weight sync, a resize
stall); every duration is read from the precomputed `StepCosts` matrices, so the per-step work
is a handful of events and one policy call. Three modes:

- `sync`: rollout of batch k, training on it, weight sync. Nothing overlaps.
- `one_step_off`: during step k, training on batch k overlaps the rollout of batch k+1 (generated
  with the weights before step k); the weight sync follows both. Step 0 also waits for batch 0.
- `async`: rollout produces batches back to back, each at most `max_staleness_steps` weight
  versions behind the step that trains on it; training takes batch k when it is ready.

At each boundary but the last the pipeline builds a `StepObservation`, asks the policy and, on
a resize, stalls for the resize's critical path. Background phases overlap the next step: they
slow its training stage by their contention, and it cannot finish before they end (the deferred
optimizer restore must land before the optimizer step). In async mode the rollout batch in
flight is drained (the stall waits for it) or aborted (it is regenerated on the new split).
A resize never changes what a step consumes: step k trains on batch k, exactly once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import simpy

from dynaresize.policies.types import (
    Allocation,
    CandidatePrediction,
    Decision,
    LendingOffer,
    StageTimes,
    StepObservation,
)
from dynaresize.traces.phases import PhaseName, PipelineMode, Role, StrategyName

from .config import InFlightHandling
from .costs.resize import ResizePlan
from .pipeline_run import DECISION_FIELDS, PipelineRecords, PipelineRun
from .trusted import trusted, trusted_complete

__all__ = ["PipelineRecords", "PipelineRun"]


@dataclass
class _PendingResize:
    resize_id: int
    floor_s: float
    """The next training stage cannot end earlier than this after it starts."""
    slowdown_s: float


class _Pipeline:
    def __init__(self, run: PipelineRun) -> None:
        costs, cost_source = run.costs, run.cost_source
        self.env = simpy.Environment()
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
        self.measured_resize_costs_s: list[float] = []
        self.step_start_s = 0.0
        self.roles = [
            [Role.TRAIN.value] * a.train_gpus + [Role.ROLLOUT.value] * a.rollout_gpus
            for a in costs.candidates
        ]
        # Plain Python lists: the per-step reads below index these thousands of times, and a
        # list index is several times cheaper than a numpy scalar read plus float().
        self.rollout_s = costs.rollout_s.tolist()
        self.train_s = costs.train_s.tolist()
        self.sync_s = costs.sync_s.tolist()
        self.predicted = run.predicted_step_s.tolist()
        self.labels = [a.label for a in costs.candidates]
        self.cost_source_value = cost_source.value
        # Every field of each candidate's prediction but the predicted step time, for each
        # current split (outer index) and candidate (inner index): staying costs nothing, a
        # move costs its kind's plan.
        self.prediction_templates = [
            [self._prediction_template(current, cand) for cand in costs.candidates]
            for current in costs.candidates
        ]

    # -- shared pieces ---------------------------------------------------------------------

    def _train_duration_s(self, k: int) -> tuple[float, int | None]:
        """Training stage of step k on the current split, with a pending resize's effect."""
        base_s = self.train_s[k][self.current]
        pending, self.pending = self.pending, None
        if pending is None:
            return base_s, None
        return max(base_s + pending.slowdown_s, pending.floor_s), pending.resize_id

    def _rollout(self, batch: int, version: int):
        """Generate one batch on the current split (a SimPy sub-process body)."""
        duration_s = self.rollout_s[batch][self.current]
        start_s = self.env.now
        yield self.env.timeout(duration_s)
        self.records.rollout_intervals.append((start_s, start_s + duration_s))
        self.batch_rollout_s[batch] = duration_s
        self.batch_version[batch] = version

    def _train_and_sync(self, train_s: float, *, one_event: bool):
        """Training then weight sync, one busy span of the training GPUs.

        With `one_event` (the lockstep modes, where no other process runs) it is one SimPy
        event; in async mode the sync's start stays an event of its own, so that events of the
        rollout process at the same instant keep their order.
        """
        start_s = self.env.now
        sync_s = self.sync_s[self.current]
        if one_event:
            yield self.env.timeout(train_s + sync_s)
        else:
            yield self.env.timeout(train_s)
            yield self.env.timeout(sync_s)
        self.records.train_intervals.append((start_s, self.env.now))

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
        now = self.env.now
        self.step_start[k] = self.step_start_s
        self.step_end[k] = now
        self.step_train_s[k] = train_s
        self.step_allocation[k] = self.current
        self.step_resize_id[k] = resize_id
        self.recent.append(
            trusted(
                StageTimes,
                step=k,
                allocation=self.costs.candidates[self.current],
                rollout_s=self.batch_rollout_s[k],
                train_s=train_s,
                sync_s=self.sync_s[self.current],
                step_s=now - self.step_start_s,
                wait_s=wait_s,
                waited_fraction=waited_fraction,
                lent=lent,
            )
        )

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
        rows = self.records.decision_rows
        if rows:
            self.records.decisions = {
                name: list(column)
                for name, column in zip(DECISION_FIELDS, zip(*rows, strict=True), strict=True)
            }
        return self.records

    def _prediction_template(self, current: Allocation, cand: Allocation) -> dict:
        plan = None if cand == current else self.plans.between(current, cand)
        return {
            "allocation": cand,
            "predicted_resize_critical_s": plan.critical_s if plan else 0.0,
            "predicted_resize_background_s": plan.slowdown_s if plan else 0.0,
            "cost_source": self.cost_source,
        }

    def _observe(self, k: int) -> StepObservation:
        current = self.current
        templates = self.prediction_templates
        candidates = tuple(
            trusted_complete(CandidatePrediction, {**templates[current][c], "predicted_step_s": x})
            for c, x in enumerate(self.predicted[k])
        )
        since = None if self.last_resize_step is None else k - self.last_resize_step
        return trusted(
            StepObservation,
            step=k,
            now_s=self.env.now,
            allocation=self.costs.candidates[self.current],
            recent=tuple(self.recent),
            candidates=candidates,
            steps_since_resize=since,
            remaining_steps=self.num_steps - k - 1,
            measured_resize_costs_s=tuple(self.measured_resize_costs_s),
            lending=self._lending_offer(k) if self.can_lend else None,
        )

    def _lending_offer(self, k: int) -> LendingOffer | None:
        """What lending would give in the next step (a pipeline that lends says)."""
        return None

    def _decide(self, k: int) -> int | None:
        """Ask the policy at the boundary after step k; the target's index, or None to hold."""
        obs = self._observe(k)
        decision: Decision = self.policy.decide(obs)
        self.last_decision = decision
        current = self.costs.candidates[self.current]
        wanted = decision.target if decision.is_resize else None
        target = None
        if wanted is not None and wanted != current:
            target = self.costs.index(wanted)
        self.records.decision_rows.append(
            (
                k,
                self.env.now,
                self.policy_name,
                "hold" if target is None else "resize",
                self.labels[self.current],
                None if target is None else self.labels[target],
                decision.reason,
                self.cost_source_value,
                None if target is None else self._plan_to(target).critical_s,
                None if target is None else self.num_resizes,
            )
        )
        return target

    def _plan_to(self, target: int) -> ResizePlan:
        candidates = self.costs.candidates
        return self.plans.between(candidates[self.current], candidates[target])

    def _resize(self, k: int, target: int, drain_s: float | None):
        """Stall for the critical path (after a drain, in async mode) and switch the split."""
        resize_id = self.num_resizes
        self.num_resizes += 1
        start_s = self.env.now
        before = self.labels[self.current]
        after = self.labels[target]
        plan = self._plan_to(target)
        strategy: StrategyName = plan.strategy

        def phase(name: PhaseName, lo: float, hi: float, critical: bool, nbytes: int) -> None:
            self.records.add(
                self.records.resizes,
                resize_id=resize_id,
                step=k,
                phase=name.value,
                strategy=strategy.value,
                from_allocation=before,
                to_allocation=after,
                start_s=lo,
                end_s=hi,
                critical=critical,
                bytes_moved=nbytes,
            )

        offset_s = start_s
        if drain_s is not None:
            phase(PhaseName.ROLLOUT_DRAIN, start_s, start_s + drain_s, True, 0)
            offset_s += drain_s
        for p in plan.phases:
            phase(p.name, offset_s + p.start_s, offset_s + p.end_s, p.critical, p.bytes_moved)
        stall_s = (offset_s - start_s) + plan.critical_s
        yield self.env.timeout(stall_s)
        self.records.stall_s += stall_s
        self.measured_resize_costs_s.append(stall_s)
        self.current = target
        self.last_resize_step = k
        self.pending = _PendingResize(
            resize_id=resize_id,
            floor_s=plan.background_tail_s,
            slowdown_s=plan.slowdown_s,
        )

    # -- lockstep modes: sync and one_step_off ---------------------------------------------

    def lockstep(self):
        one_step_off = self.pipeline.mode is PipelineMode.ONE_STEP_OFF
        if one_step_off and self.num_steps:
            yield from self._first_batch()
        for k in range(self.num_steps):
            train_s, resize_id = self._train_duration_s(k)
            yield from self._lockstep_stage(k, train_s, one_step_off=one_step_off)
            self._record(k, train_s, resize_id)
            if k + 1 < self.num_steps:
                target = self._decide(k)
                if target is not None:
                    yield from self._resize(k, target, None)
            self.step_start_s = self.env.now
        self.records.end_s = self.env.now

    def _first_batch(self):
        """One-step-off: batch 0 is generated before step 0."""
        yield from self._rollout(0, 0)

    def _lockstep_stage(self, k: int, train_s: float, *, one_step_off: bool):
        """Step k's stages, as a SimPy sub-process body (returned, not run, so that the loop
        delegates to it directly): overlapped with the next batch's rollout, or after its own."""
        if one_step_off:
            return self._overlapped_stage(k, train_s)
        return self._sync_stage(k, train_s)

    def _sync_stage(self, k: int, train_s: float):
        yield from self._rollout(k, k)
        yield from self._train_and_sync(train_s, one_event=True)

    _record = _record_step
    """Step k's records (a pipeline that follows samples adds how training waited)."""

    def _overlapped_stage(self, k: int, train_s: float):
        """Train on batch k while batch k+1 is generated (weights version k), then sync."""
        start_s = self.env.now
        next_rollout_s = 0.0
        if k + 1 < self.num_steps:
            next_rollout_s = self.rollout_s[k + 1][self.current]
            self.batch_rollout_s[k + 1] = next_rollout_s
            self.batch_version[k + 1] = k
            self.records.rollout_intervals.append((start_s, start_s + next_rollout_s))
        sync_s = self.sync_s[self.current]
        # The overlapped stage and the sync after it follow each other with nothing else in
        # between: one SimPy event for both.
        yield self.env.timeout(max(train_s, next_rollout_s) + sync_s)
        self.records.train_intervals.append((start_s, start_s + train_s))
        self.records.train_intervals.append((self.env.now - sync_s, self.env.now))

    # -- async mode -------------------------------------------------------------------------

    def run_async(self):
        self.version = 0
        self.version_events: dict[int, simpy.Event] = {}
        self.batch_events = [self.env.event() for _ in range(self.num_steps)]
        self.paused = False
        self.resume = self.env.event()
        self.in_flight_ends_s: float | None = None
        """When the rollout batch in flight will be done; None while none is generating."""
        self.rollout_proc = self.env.process(self._rollout_loop())
        self.env.process(self._trainer_loop())
        return self

    def _wait_version(self, version: int):
        if self.version >= version:
            return None
        if version not in self.version_events:
            self.version_events[version] = self.env.event()
        return self.version_events[version]

    def _rollout_loop(self):
        batch = 0
        while batch < self.num_steps:
            gate = self._wait_version(batch - self.pipeline.max_staleness_steps)
            if gate is not None:
                yield gate
            if self.paused:
                yield self.resume
            duration_s = self.rollout_s[batch][self.current]
            start_s = self.env.now
            version = self.version
            self.in_flight_ends_s = start_s + duration_s
            try:
                yield self.env.timeout(duration_s)
            except simpy.Interrupt:
                # Aborted by a resize: the work is lost; regenerate the batch afterwards.
                self.records.rollout_intervals.append((start_s, self.env.now))
                self.in_flight_ends_s = None
                continue
            self.in_flight_ends_s = None
            self.records.rollout_intervals.append((start_s, self.env.now))
            self.batch_rollout_s[batch] = duration_s
            self.batch_version[batch] = version
            self.batch_events[batch].succeed()
            batch += 1

    def _trainer_loop(self):
        for k in range(self.num_steps):
            yield self._await_batch(k)
            train_s, resize_id = self._train_duration_s(k)
            yield from self._train_and_sync(train_s, one_event=False)
            self.version = k + 1
            event = self.version_events.pop(self.version, None)
            if event is not None:
                event.succeed()
            self._record(k, train_s, resize_id)
            if k + 1 < self.num_steps:
                target = self._decide(k)
                if target is not None:
                    yield from self._async_resize(k, target)
            self.step_start_s = self.env.now
        self.records.end_s = self.env.now

    def _await_batch(self, k: int) -> simpy.Event:
        """The event training waits on for batch k (its being generated)."""
        return self.batch_events[k]

    def _async_resize(self, k: int, target: int):
        self.paused = True
        drain_s = 0.0
        if self.in_flight_ends_s is not None:
            if self.pipeline.in_flight is InFlightHandling.DRAIN:
                drain_s = self.in_flight_ends_s - self.env.now
                # The drain is recorded as a phase and waited for inside the stall below.
            else:
                self.rollout_proc.interrupt("resize")
        yield from self._resize(k, target, drain_s)
        self.paused = False
        resume, self.resume = self.resume, self.env.event()
        resume.succeed()
