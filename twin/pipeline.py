"""The SimPy pipeline: stages, step boundaries, policy calls and resizes, on a simulated clock.

SimPy carries only stage-level events (a rollout, a training stage, a weight sync, a resize
stall); every duration is read from the precomputed `StepCosts` matrices, so the per-step work
is a handful of events and one policy call. The lockstep modes of the whole-batch pipeline run
one process, which nothing can interleave with: there `StepClock` stands in for SimPy's
environment, each wait just moving the clock on (`now + delay`, SimPy's own arithmetic, so the
records are the same to the bit) without an event queue, and `lockstep_on` runs the stages as
plain calls, with no generator to resume at each wait. Three modes:

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

from typing import TYPE_CHECKING

from dynaresize.traces.phases import PipelineMode

from ._lazy import LazyModule
from .config import InFlightHandling
from .pipeline_core import PipelineCore
from .pipeline_run import PipelineRecords, PipelineRun

if TYPE_CHECKING:
    import simpy
else:
    simpy = LazyModule("simpy")


__all__ = ["PipelineRecords", "PipelineRun"]


class StepClock:
    """The clock of a run with a single process: what of SimPy's environment the lockstep
    stages use (`now`, `timeout`), a wait being the delay itself, which the run's driver
    (`_Pipeline.lockstep_on`) adds to the clock. Starts at SimPy's initial time, 0."""

    def __init__(self) -> None:
        self.now: float = 0

    def timeout(self, delay: float) -> float:
        if delay < 0:  # as SimPy refuses it
            raise ValueError(f"Negative delay {delay}")
        return delay


class _Pipeline(PipelineCore):
    """The SimPy processes of the three modes, over the state and records of `PipelineCore`."""

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
            self.step_start_s = self.clock.now
        self.records.end_s = self.clock.now

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

    def _overlapped_stage(self, k: int, train_s: float):
        """Train on batch k while batch k+1 is generated (weights version k), then sync."""
        start_s, wait_s, sync_s = self._overlap_begins(k, train_s)
        yield self.clock.timeout(wait_s)
        self._overlap_ends(start_s, train_s, sync_s)

    def _overlap_begins(self, k: int, train_s: float) -> tuple[float, float, float]:
        """The overlapped stage as it starts (the next batch's records): its start, how long
        it and the sync after it take, and the sync."""
        start_s = self.clock.now
        next_rollout_s = 0.0
        if k + 1 < self.num_steps:
            next_rollout_s = self.rollout_s_on[self.current][k + 1]
            self.batch_rollout_s[k + 1] = next_rollout_s
            self.batch_version[k + 1] = k
            self.records.rollout_intervals.add(start_s, start_s + next_rollout_s)
        sync_s = self.sync_s[self.current]
        # The overlapped stage and the sync after it follow each other with nothing else in
        # between: one wait for both.
        return start_s, max(train_s, next_rollout_s) + sync_s, sync_s

    def _overlap_ends(self, start_s: float, train_s: float, sync_s: float) -> None:
        """The training GPUs' busy spans of the stage, once it is over."""
        # `Intervals.add` twice, written out: this runs at every step
        train = self.records.train_intervals
        now = self.clock.now
        train.starts_s.append(start_s)
        train.ends_s.append(start_s + train_s)
        train.starts_s.append(now - sync_s)
        train.ends_s.append(now)

    def lockstep_on(self, clock: StepClock) -> None:
        """`lockstep` on `clock` (this pipeline's), without generators: the same stages,
        records and additions to the clock, each wait added where it is taken rather than
        yielded up through the stages (one process, nothing to interleave with)."""
        one_step_off = self.pipeline.mode is PipelineMode.ONE_STEP_OFF
        num_steps = self.num_steps
        if one_step_off and num_steps:  # batch 0 is generated before step 0
            duration_s = self.rollout_s_on[self.current][0]
            start_s = clock.now
            clock.now += clock.timeout(duration_s)
            self._rolled_out(0, 0, start_s, duration_s)
        for k in range(num_steps):
            train_s, resize_id = self._train_duration_s(k)
            if one_step_off:
                start_s, wait_s, sync_s = self._overlap_begins(k, train_s)
                clock.now += clock.timeout(wait_s)
                self._overlap_ends(start_s, train_s, sync_s)
            else:  # the batch's rollout, then training and the sync as one busy span
                duration_s = self.rollout_s_on[self.current][k]
                start_s = clock.now
                clock.now += clock.timeout(duration_s)
                self._rolled_out(k, k, start_s, duration_s)
                start_s = clock.now
                clock.now += clock.timeout(train_s + self.sync_s[self.current])
                self.records.train_intervals.add(start_s, clock.now)
            self._record(k, train_s, resize_id)
            if k + 1 < num_steps:
                target = self._decide(k)
                if target is not None:
                    stall_s, plan, new_id = self._start_resize(k, target, None)
                    clock.now += clock.timeout(stall_s)
                    self._end_resize(k, target, stall_s, plan, new_id)
            self.step_start_s = clock.now
        self.records.end_s = clock.now

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
            duration_s = self.rollout_s_on[self.current][batch]
            start_s = self.env.now
            version = self.version
            self.in_flight_ends_s = start_s + duration_s
            try:
                yield self.env.timeout(duration_s)
            except simpy.Interrupt:
                # Aborted by a resize: the work is lost; regenerate the batch afterwards.
                self.records.rollout_intervals.add(start_s, self.env.now)
                self.in_flight_ends_s = None
                continue
            self.in_flight_ends_s = None
            self.records.rollout_intervals.add(start_s, self.env.now)
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
