"""A rollout batch in flight, sample by sample: where each request runs, how far it got, and
what happens to it when replicas join or leave before the batch is done.

The rollout cost model prices a whole batch on a fixed set of replicas. Lending and partial
rollout change that set part-way: lent replicas join while training waits and leave before it
trains; a resize takes replicas away or adds them. A `BatchInFlight` keeps each sample's tokens
generated so far and lays the rest out on the current replicas (`costs.replica_timeline`); a
`replan` at time t reads every sample's progress at t, then:

- requests in flight on a replica that stays, and is not rebalanced, keep running there;
- requests in flight on a replica that leaves (or is rebalanced) are aborted: with
  `keep_tokens` (partial rollout) they keep their tokens and resume elsewhere, paying the
  prefill of prompt plus kept tokens; without it they start again from the prompt;
- requests not yet started, and the aborted ones, are spread over the new set of replicas so
  that every replica holds as many requests as possible alike (ties to the first replicas, the
  equal contiguous chunks of the rollout model when nothing has started).

Until the first replan the batch ends exactly when the rollout model says (`duration_s`, the
step-cost matrix's figure), so a batch nobody disturbs is the batch the pipeline always had.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from .costs.replica_timeline import ReplicaTimeline, plan_replica
from .costs.rollout import RolloutCostParams

LENT_REPLICA_BASE = 1_000_000
"""Ids of lent replicas start here (the Rollout GPUs' replicas are 0, 1, ...)."""


def lent_replica_ids(count: int) -> list[int]:
    return [LENT_REPLICA_BASE + i for i in range(count)]


@dataclass(frozen=True)
class _Segment:
    start_s: float
    """When the layout was made (absolute)."""
    factor: float
    """How much replicas sharing devices stretch replica seconds into wall seconds."""
    timelines: dict[int, ReplicaTimeline]
    starts_s: dict[int, float]
    """When each replica's timeline begins: the layout's start, or for a replica that kept its
    requests in flight, the end of its last whole decode iteration (a replan does not cut an
    iteration short)."""

    @property
    def end_s(self) -> float:
        ends = (self.starts_s[r] + self.factor * t.total_s for r, t in self.timelines.items())
        return max(ends, default=self.start_s)

    def elapsed(self, rid: int, t: float) -> float:
        """Replica seconds of replica `rid`'s timeline by absolute time t."""
        return (t - self.starts_s[rid]) / self.factor if self.factor > 0 else 0.0

    def finish_s(self, rid: int) -> np.ndarray:
        """Absolute finish time of each sample of replica `rid`'s timeline."""
        return self.starts_s[rid] + self.factor * self.timelines[rid].finish_s()


def spread_counts(continuing: np.ndarray, num_to_place: int) -> np.ndarray:
    """How many of `num_to_place` requests each replica takes so that the counts (continuing
    plus placed) are as equal as possible: water-filling from the least loaded, any rounding
    excess taken off the last replicas at the top level."""
    continuing = np.asarray(continuing, dtype=np.int64)
    if num_to_place == 0 or len(continuing) == 0:
        return np.zeros(len(continuing), dtype=np.int64)
    level = int(continuing.min())
    while np.maximum(0, level - continuing).sum() < num_to_place:
        level += max(
            1, (num_to_place - int(np.maximum(0, level - continuing).sum())) // len(continuing)
        )
    take = np.maximum(0, level - continuing)
    excess = int(take.sum()) - num_to_place
    for r in range(len(take) - 1, -1, -1):  # a few replicas: a short loop
        if excess == 0:
            break
        if take[r] > 0 and continuing[r] + take[r] == level:
            take[r] -= 1
            excess -= 1
    return take


class BatchInFlight:
    """One batch's samples from their first request to their last token."""

    def __init__(
        self,
        prompt_tokens: np.ndarray,
        response_tokens: np.ndarray,
        *,
        params: RolloutCostParams,
        contention: Callable[[int], float],
        replicas: Sequence[int],
        start_s: float,
        duration_s: float,
        keep_tokens: bool,
        warmup_s: float = 0.0,
    ) -> None:
        self.prompt = np.asarray(prompt_tokens, dtype=np.int64)
        self.length = np.asarray(response_tokens, dtype=np.int64)
        n = len(self.length)
        self.params = params
        self.contention = contention
        self.keep_tokens = keep_tokens
        self.start_s = start_s
        self.kept = np.zeros(n, dtype=np.int64)
        """Tokens generated before the current segment and kept."""
        self.decoded = np.zeros(n, dtype=np.int64)
        """Decode iterations spent on each sample, discarded ones included."""
        self.resumes = np.zeros(n, dtype=np.int64)
        self.finish_s = np.full(n, np.nan)
        self._replicas = list(replicas)
        self._decode_from_s = start_s + warmup_s
        self._fixed_end_s: float | None = start_s + duration_s
        self._segment: _Segment | None = None
        self._finish_sorted: np.ndarray | None = None

    # -- reading ------------------------------------------------------------------------

    @property
    def num_samples(self) -> int:
        return len(self.length)

    @property
    def replicas(self) -> list[int]:
        return list(self._replicas)

    @property
    def segment(self) -> _Segment:
        """The current layout (made on first use: a batch nobody asks about costs nothing)."""
        if self._segment is None:
            pool = np.arange(self.num_samples)
            self._segment = self._lay_out(self._decode_from_s, self._replicas, {}, pool)
        return self._segment

    @property
    def end_s(self) -> float:
        """When its last sample is out."""
        if self._fixed_end_s is not None:
            return self._fixed_end_s
        finished = self.finish_s[~np.isnan(self.finish_s)]
        return max(self.segment.end_s, float(finished.max(initial=self.start_s)))

    def _segment_finish_sorted(self) -> np.ndarray:
        if self._finish_sorted is None:
            seg = self.segment
            parts = [seg.finish_s(rid) for rid in seg.timelines]
            self._finish_sorted = np.sort(np.concatenate(parts)) if parts else np.zeros(0)
        return self._finish_sorted

    def ready_fraction(self, t: float) -> float:
        """Share of the batch's samples finished by time t."""
        if self.num_samples == 0 or t >= self.end_s:
            return 1.0
        before = int(np.count_nonzero(~np.isnan(self.finish_s)))
        now = int(np.searchsorted(self._segment_finish_sorted(), t, side="right"))
        return min(1.0, (before + now) / self.num_samples)

    def ready_time(self, fraction: float) -> float:
        """When a `fraction` share of the batch's samples is finished (the end for 1)."""
        needed = int(np.ceil(fraction * self.num_samples - 1e-9))
        if needed >= self.num_samples:
            return self.end_s
        before = int(np.count_nonzero(~np.isnan(self.finish_s)))
        if needed <= before:
            return self.segment.start_s
        return float(min(self._segment_finish_sorted()[needed - before - 1], self.end_s))

    # -- changing replicas --------------------------------------------------------------

    def replan(self, t: float, *, replicas: Sequence[int], abort: Collection[int] = ()) -> None:
        """At time t the batch continues on `replicas`; requests in flight on a replica that is
        not among them, or is in `abort`, are aborted (tokens kept with `keep_tokens`)."""
        seg = self.segment
        t = max(t, seg.start_s)
        own: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        kept_from: dict[int, float] = {}
        aborted, orphaned = [], []
        for rid, line in seg.timelines.items():
            done_it = line.iterations_done(max(0.0, seg.elapsed(rid, t)))
            generated = np.clip(done_it - line.start_it, 0, line.end_it - line.start_it)
            self.kept[line.samples] += generated
            self.decoded[line.samples] += generated
            finished = line.end_it <= done_it
            newly = finished & np.isnan(self.finish_s[line.samples])
            self.finish_s[line.samples[newly]] = seg.finish_s(rid)[newly]
            started = line.samples[(line.start_it < done_it) & ~finished]
            waiting = line.samples[(line.start_it >= done_it) & ~finished]  # FIFO order
            if rid in replicas and rid not in abort:
                own[rid] = (started, waiting)
                idle = bool(finished.all())  # idle since its last sample: new work starts at t
                if not idle and done_it > 0:  # it goes on from the end of its last whole iteration
                    boundary = line.end_of_iteration_s(np.array([done_it - 1]))[0]
                    kept_from[rid] = seg.starts_s[rid] + seg.factor * float(boundary)
                elif not idle and seg.starts_s[rid] > t:
                    kept_from[rid] = seg.starts_s[rid]
            else:
                aborted.append(started)
                orphaned.append(np.sort(waiting))
        gone = np.sort(np.concatenate(aborted)) if aborted else np.zeros(0, np.int64)
        self.resumes[gone] += 1
        if not self.keep_tokens:
            self.kept[gone] = 0
        pool = np.concatenate([gone, *orphaned]).astype(np.int64)
        self._replicas = list(replicas)
        self._fixed_end_s = None
        self._finish_sorted = None
        self._segment = self._lay_out(t, self._replicas, own, pool, kept_from)

    def _lay_out(
        self,
        t: float,
        replicas: list[int],
        own: dict[int, tuple[np.ndarray, np.ndarray]],
        pool: np.ndarray,
        kept_from: dict[int, float] | None = None,
    ) -> _Segment:
        """Queues that balance the replicas' request counts: each keeps what runs on it and the
        head of its own queue; the tails of long queues and the `pool` go, in that order after
        the pool, to the replicas with the fewest (least-loaded routing of waiting requests)."""
        empty = np.zeros(0, np.int64)
        running = [own.get(r, (empty, empty))[0] for r in replicas]
        waiting = [own.get(r, (empty, empty))[1] for r in replicas]
        take = spread_counts(
            np.array([len(x) for x in running], dtype=np.int64),
            sum(len(w) for w in waiting) + len(pool),
        )
        moving = np.concatenate([pool, *(w[k:] for w, k in zip(waiting, take, strict=True))])
        need = np.maximum(0, take - np.array([len(w) for w in waiting], dtype=np.int64))
        bounds = np.concatenate([[0], np.cumsum(need)]).astype(np.int64)
        timelines = {}
        for i, rid in enumerate(replicas):
            queued = np.concatenate(
                [waiting[i][: take[i]], moving[bounds[i] : bounds[i + 1]]]
            ).astype(np.int64)
            samples = np.concatenate([running[i], queued]).astype(np.int64)
            if len(samples) == 0:
                continue
            prefill = np.concatenate([np.zeros(len(running[i]), np.int64), self._prefill(queued)])
            decode = self.length[samples] - self.kept[samples]
            timelines[rid] = plan_replica(samples, prefill, decode, self.params)
        starts = {rid: (kept_from or {}).get(rid, t) for rid in timelines}
        return _Segment(t, self.contention(len(replicas)), timelines, starts)

    def _prefill(self, samples: np.ndarray) -> np.ndarray:
        """Tokens a (re)started request prefills: its prompt and the tokens it kept."""
        return self.prompt[samples] + self.kept[samples]

    def complete(self) -> None:
        """Mark every sample finished (the batch is done): tokens all kept, finish times set."""
        seg = self.segment
        for rid, line in seg.timelines.items():
            todo = np.isnan(self.finish_s[line.samples])
            self.finish_s[line.samples[todo]] = seg.finish_s(rid)[todo]
            self.decoded[line.samples] += line.end_it - line.start_it
        self.kept[:] = self.length
        np.minimum(self.finish_s, self.end_s, out=self.finish_s)
