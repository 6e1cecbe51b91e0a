"""The pipeline sample by sample: lending the trainers' GPUs within a step, partial rollouts.

`pipeline.lending` and `pipeline.partial_rollout` need what the step-cost matrices leave out:
which requests of a batch are in flight when replicas join or leave. This pipeline keeps each
batch as a `BatchInFlight` and is otherwise the one of pipeline.py (same modes, boundaries,
policy calls and resizes; SimPy still carries only stage-level events). A batch nobody
disturbs ends when the matrices say, with the same events, so a run that never lends nor
aborts a request has the records the whole-batch pipeline gives.

- Lending (lend_wait.py): at a boundary the policy may answer with a `LendAction`; the next
  time training waits for its batch, the trainers' replicas are activated, serve, and are
  deactivated before training. The observation carries a `LendingOffer` (replica counts, how
  much of the next batch is out, the predicted wait and saving, measured switch costs).
- Partial rollout, in async mode: a resize no longer drains or aborts the batch in flight; the
  requests on replicas that leave are aborted with their tokens kept and resume on the
  replicas that stay, which keep generating through the resize; replicas that arrive take the
  requests not yet started.

Per step it records how long training waited and whether it lent (step columns `lent_gpus`,
`lend_start_s`, `lend_end_s`, `lend_switch_s`); per sample, when it finished and how often it
was resumed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import simpy

from dynaresize.policies.types import LendAction, LendingOffer
from dynaresize.traces.phases import PipelineMode
from dynaresize.traces.workload import Workload

from .batch_in_flight import BatchInFlight, lent_replica_ids
from .config import InFlightHandling
from .costs.lend import LendPlan
from .costs.rollout import RolloutCostParams, contention_factor
from .lend_wait import WaitOutcome, clairvoyant_lend, lend_outcome, plain_wait
from .pipeline import _Pipeline
from .pipeline_run import PipelineRecords, PipelineRun


@dataclass(frozen=True)
class SampleInputs:
    """What the sample-level pipeline reads beyond the step-cost matrices."""

    workload: Workload
    rollout: RolloutCostParams
    tensor_parallel_size: int
    lend: LendPlan
    predicted_rollout_s: np.ndarray
    """(num_steps, num_candidates): mean rollout time of the last batches, no look-ahead."""
    predicted_train_s: np.ndarray
    """(num_steps, num_candidates): the same for training."""
    clairvoyant_lending: bool = False
    """Ignore the policy's lending and, at every wait, lend until the share of the batch that
    lets training start earliest, or not at all (knowing the lengths): the offline bound of
    lending (lend_wait.clairvoyant_lend)."""


class SamplePipeline(_Pipeline):
    def __init__(self, run: PipelineRun) -> None:
        super().__init__(run)
        assert run.samples is not None
        self.inputs = inputs = run.samples
        cfg = run.pipeline
        self.keep_tokens = cfg.partial_rollout
        self.rebalance = cfg.lending_rebalance and cfg.partial_rollout
        self.can_lend = cfg.lending
        tp = inputs.tensor_parallel_size
        self.num_replicas = [a.rollout_gpus // tp for a in self.costs.candidates]
        self.num_lent = [a.train_gpus // tp if cfg.lending else 0 for a in self.costs.candidates]
        n = self.num_steps
        self.waits: list[WaitOutcome | None] = [None] * n
        self.lend_flags: list[bool] = []
        window = run.measured_costs_window  # the offer carries the most recent switches only
        self.measured_activate_s: deque[float] = deque(maxlen=window)
        self.measured_deactivate_s: deque[float] = deque(maxlen=window)
        self.measured_cycles_s: deque[float] = deque(maxlen=window)
        total = len(inputs.workload.response_tokens)
        self.sample_finish_s = np.full(total, np.nan)
        self.sample_resumes = np.zeros(total, dtype=np.int64)
        self.batch_start_s = [0.0] * n
        self.free_s = [0.0] * n
        """When training was free for step k (async mode)."""

    # -- batches ------------------------------------------------------------------------

    def _new_batch(self, b: int) -> BatchInFlight:
        lo, hi = self.inputs.workload.step_offsets[b : b + 2]
        params = self.inputs.rollout
        self.batch_start_s[b] = self.env.now
        return BatchInFlight(
            self.inputs.workload.prompt_tokens[lo:hi],
            self.inputs.workload.response_tokens[lo:hi],
            params=params,
            contention=lambda count: contention_factor(count, params),
            replicas=list(range(self.num_replicas[self.current])),
            start_s=self.env.now,
            duration_s=self.rollout_s_on[self.current][b],
            keep_tokens=self.keep_tokens,
            warmup_s=params.first_step_warmup_s if b == 0 else 0.0,
        )

    def _batch_done(self, b: int, batch: BatchInFlight, version: int) -> None:
        batch.complete()
        lo, hi = self.inputs.workload.step_offsets[b : b + 2]
        self.sample_finish_s[lo:hi] = batch.finish_s
        self.sample_resumes[lo:hi] = batch.resumes
        self.batch_version[b] = version

    def _take_lend(self) -> LendAction | None:
        """The lend the last decision asked for (a clairvoyant gate considers every wait)."""
        if self.num_lent[self.current] == 0:
            return None
        if self.inputs.clairvoyant_lending:
            return LendAction()
        decision = self.last_decision
        return decision.lend if decision is not None else None

    def _wait(self, k: int, batch: BatchInFlight, lend: LendAction | None) -> WaitOutcome:
        """Work out step k's wait for `batch` from now, lending as asked."""
        now = self.env.now
        lent = lent_replica_ids(self.num_lent[self.current])
        plan = self.inputs.lend
        if lend is not None and self.inputs.clairvoyant_lending:
            until = clairvoyant_lend(
                batch, now, lent_replicas=lent, plan=plan, rebalance=self.rebalance
            )
            lend = None if until is None else LendAction(until_ready_fraction=until)
        if lend is None or not lent:
            outcome = plain_wait(batch, now)
        else:
            outcome = lend_outcome(
                batch,
                now,
                lent_replicas=lent,
                until=lend.until_ready_fraction,
                plan=plan,
                rebalance=self.rebalance,
            )
            self.measured_activate_s.append(plan.activate_s)
            self.measured_deactivate_s.append(plan.deactivate_s)
            self.measured_cycles_s.append(plan.switch_s)
            if outcome.serve_end_s > outcome.activate_end_s:
                self.records.train_intervals.add(outcome.activate_end_s, outcome.serve_end_s)
        self.waits[k] = outcome
        return outcome

    def _record(self, k: int, train_s: float, resize_id: int | None, **_given: object) -> None:
        """`_record_step` with how training waited in step k, from `self.waits` (what the
        whole-batch pipeline's keywords would say is already there)."""
        wait = self.waits[k]
        if wait is None:  # no batch in flight when training was free (or a last step)
            started_s = self.env.now - train_s - self.sync_s[self.current]
            waited_s = 0.0
            if self.pipeline.mode is PipelineMode.ASYNC:
                waited_s = max(0.0, started_s - self.free_s[k])
            fraction = 1.0 if waited_s > 0 else 0.0
            self._record_step(k, train_s, resize_id, wait_s=waited_s, waited_fraction=fraction)
            return
        self._record_step(
            k,
            train_s,
            resize_id,
            wait_s=wait.wait_s,
            waited_fraction=wait.waited_fraction,
            lent=wait.lent,
        )

    def _decide(self, k: int) -> int | None:
        target = super()._decide(k)
        decision = self.last_decision
        self.lend_flags.append(self.can_lend and decision is not None and decision.lend is not None)
        return target

    # -- lockstep modes -----------------------------------------------------------------

    def _first_batch(self):
        batch = self._new_batch(0)
        yield from self._rollout(0, 0)
        self._batch_done(0, batch, 0)

    def _lockstep_stage(self, k: int, train_s: float, *, one_step_off: bool):
        lend = self._take_lend()
        if one_step_off:
            return self._overlapped(k, train_s, lend)
        return self._sync_step(k, train_s, lend)

    def _sync_step(self, k: int, train_s: float, lend: LendAction | None):
        batch = self._new_batch(k)
        if lend is None:
            self.waits[k] = plain_wait(batch, self.env.now)
            yield from self._rollout(k, k)
        else:
            start_s = self.env.now
            outcome = self._wait(k, batch, lend)
            yield self.env.timeout(outcome.ready_s - start_s)
            self.records.rollout_intervals.add(start_s, batch.end_s)
            self.batch_rollout_s[k] = batch.end_s - start_s
        self._batch_done(k, batch, k)
        yield from self._train_and_sync(train_s, one_event=True)

    def _overlapped(self, k: int, train_s: float, lend: LendAction | None):
        """Train on batch k while batch k+1 is generated; lend while training waits for it."""
        if k + 1 >= self.num_steps or lend is None:
            batch = self._new_batch(k + 1) if k + 1 < self.num_steps else None
            if batch is not None:
                self.waits[k] = plain_wait(batch, self.env.now + train_s)
            yield from self._overlapped_stage(k, train_s)
            if batch is not None:
                self._batch_done(k + 1, batch, k)
            return
        start_s = self.env.now
        batch = self._new_batch(k + 1)
        yield self.env.timeout(train_s)
        self.records.train_intervals.add(start_s, start_s + train_s)
        outcome = self._wait(k, batch, lend)
        yield self.env.timeout(outcome.ready_s - self.env.now)
        self.records.rollout_intervals.add(start_s, batch.end_s)
        self.batch_rollout_s[k + 1] = batch.end_s - start_s
        self._batch_done(k + 1, batch, k)
        sync_s = self.sync_s[self.current]
        yield self.env.timeout(sync_s)
        self.records.train_intervals.add(self.env.now - sync_s, self.env.now)

    # -- async mode ---------------------------------------------------------------------

    def run_async(self):
        self.in_flight: tuple[int, BatchInFlight] | None = None
        return super().run_async()

    def _rollout_loop(self):
        b = 0
        while b < self.num_steps:
            gate = self._wait_version(b - self.pipeline.max_staleness_steps)
            if gate is not None:
                yield gate
            if self.paused:
                yield self.resume
            batch = self._new_batch(b)
            start_s, version = self.env.now, self.version
            self.in_flight = (b, batch)
            self.in_flight_ends_s = batch.end_s
            duration_s = self.rollout_s_on[self.current][b]
            wait_s, disturbed, aborted = duration_s, False, False
            while True:
                try:
                    yield self.env.timeout(wait_s)
                    break
                except simpy.Interrupt as signal:
                    if signal.cause == "abort":
                        aborted = True
                        break
                    disturbed = True
                    wait_s = max(0.0, batch.end_s - self.env.now)
            self.in_flight = None
            self.in_flight_ends_s = None
            end_s = self.env.now if disturbed or aborted else start_s + duration_s
            self.records.rollout_intervals.add(start_s, end_s)
            if aborted:
                continue  # the whole batch is generated again after the resize
            self.batch_rollout_s[b] = end_s - start_s if disturbed else duration_s
            self._batch_done(b, batch, version)
            self.batch_events[b].succeed()
            b += 1

    def _replanned(self) -> None:
        """The batch in flight ends at another time: the rollout process waits anew."""
        assert self.in_flight is not None
        self.in_flight_ends_s = self.in_flight[1].end_s
        self.rollout_proc.interrupt("replan")

    def _await_batch(self, k: int) -> simpy.Event:
        """Training is free and needs batch k: the event to wait on, a process that lends first
        where the last decision asked to (else the batch's own event, as in pipeline.py)."""
        lend, ready = self._take_lend(), self.batch_events[k]
        self.free_s[k] = self.env.now
        if ready.triggered:
            return ready
        if lend is None:
            flight = self.in_flight
            if flight is not None and flight[0] == k:
                self._wait(k, flight[1], None)
            return ready
        return self.env.process(self._lend_then_wait(k, lend))

    def _lend_then_wait(self, k: int, lend: LendAction):
        yield self.env.timeout(0)  # a batch that may start at this instant, starts
        flight = self.in_flight
        if not self.batch_events[k].triggered and flight is not None and flight[0] == k:
            outcome = self._wait(k, flight[1], lend)
            if outcome.lent:
                self._replanned()
                yield self.env.timeout(outcome.ready_s - self.env.now)
        yield self.batch_events[k]

    def _async_resize(self, k: int, target: int):
        if not self.keep_tokens:
            if self.in_flight is not None and self.pipeline.in_flight is InFlightHandling.ABORT:
                self.paused = True
                self.rollout_proc.interrupt("abort")
                self.in_flight_ends_s = None
            yield from super()._async_resize(k, target)
            return
        self.paused = True
        staying = list(range(min(self.num_replicas[self.current], self.num_replicas[target])))
        flight = self.in_flight
        if flight is not None and flight[1].end_s > self.env.now:
            flight[1].replan(self.env.now, replicas=staying)
            self._replanned()
        yield from self._resize(k, target, None)
        flight = self.in_flight
        arriving = self.num_replicas[self.current] > len(staying)
        if arriving and flight is not None and flight[1].end_s > self.env.now:
            flight[1].replan(self.env.now, replicas=list(range(self.num_replicas[self.current])))
            self._replanned()
        self.paused = False
        resume, self.resume = self.resume, self.env.event()
        resume.succeed()

    # -- what the policy sees, and the records ------------------------------------------

    def _lending_offer(self, k: int) -> LendingOffer | None:
        if not self.can_lend:
            return None
        c = self.current
        rollout_s = self.inputs.predicted_rollout_s[k, c]
        train_s = self.inputs.predicted_train_s[k, c]
        ready, wait_s = self._next_batch_outlook(k, rollout_s, train_s)
        plan = self.inputs.lend
        home, lent = self.num_replicas[c], self.num_lent[c]
        lent_wait_s = plan.switch_s + max(0.0, wait_s - plan.activate_s) * home / (home + lent)
        offsets = self.inputs.workload.step_offsets
        return LendingOffer(
            lent_replicas=lent,
            rollout_replicas=home,
            samples_per_step=max(1, int(offsets[k + 2] - offsets[k + 1])),
            ready_fraction=ready,
            predicted_wait_s=wait_s,
            predicted_saving_s=wait_s - lent_wait_s if lent else 0.0,
            predicted_activate_s=plan.activate_s,
            predicted_deactivate_s=plan.deactivate_s,
            measured_activate_s=tuple(self.measured_activate_s),
            measured_deactivate_s=tuple(self.measured_deactivate_s),
            measured_cycles_s=tuple(self.measured_cycles_s),
        )

    def _next_batch_outlook(self, k: int, rollout_s: float, train_s: float) -> tuple[float, float]:
        """(share of the next batch out when training would wait for it, predicted wait) from
        the recent batches' times and the batch's progress, never its lengths."""
        mode = self.pipeline.mode
        if mode is PipelineMode.ONE_STEP_OFF:
            ready = min(1.0, train_s / rollout_s) if rollout_s > 0 else 1.0
            return ready, max(0.0, rollout_s - train_s)
        if mode is PipelineMode.SYNC:
            return 0.0, rollout_s
        ready, wait_s = 0.0, rollout_s
        for b in range(k + 1, self.num_steps):
            if self.batch_events[b].triggered:
                ready, wait_s = ready + 1.0, 0.0
                continue
            flight = self.in_flight
            if flight is not None and flight[0] == b:
                ready += flight[1].ready_fraction(self.env.now)
                if b == k + 1:
                    wait_s = max(0.0, self.batch_start_s[b] + rollout_s - self.env.now)
            break
        return ready, wait_s

    def finish(self) -> PipelineRecords:
        records = super().finish()
        n = self.num_steps
        lent = np.zeros(n, dtype=np.int64)
        start, end, switch = (np.full(n, np.nan) for _ in range(3))
        tp = self.inputs.tensor_parallel_size
        for k, wait in enumerate(self.waits):
            if wait is not None and wait.lent:
                alloc = self.step_allocation[k]
                lent[k] = self.num_lent[alloc] * tp
                start[k], end[k] = wait.free_s, wait.serve_end_s + self.inputs.lend.deactivate_s
                switch[k] = self.inputs.lend.switch_s
        if self.can_lend:
            records.lending = {
                "lent_gpus": lent,
                "lend_start_s": start,
                "lend_end_s": end,
                "lend_switch_s": switch,
            }
            if self.records.decisions:
                self.records.decisions["lend"] = list(self.lend_flags)
        records.samples = {"finish_s": self.sample_finish_s, "num_resumes": self.sample_resumes}
        return records
