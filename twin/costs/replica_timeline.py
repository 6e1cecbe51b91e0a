"""One replica's queue laid out in time, sample by sample: the rollout model's schedule made
explicit, so that a batch can be stopped part-way (a lend, a resize) and resumed elsewhere.

The rollout model (rollout.py) admits a replica's samples FIFO into `C` slots and charges
`a + b * active` per decode iteration and `prefill_s_per_token` per prompt token on admission.
Here the schedule behind it is kept: sample j starts decoding at iteration `s_j` (FIFO list
scheduling, rollout_kernels.fifo_start_iterations) and ends at `e_j = s_j + d_j`. Iteration x
(0-based) ends at

    E(x) = a (x + 1) + b * (active-sequence iterations of the first x + 1 iterations)
         + prefill_s_per_token * (prefill tokens of the samples admitted at or before x)

which is linear in x between events (an admission or a completion). A replica's whole time is
`prefill * sum(q) + a * T + b * sum(d)`, exactly the rollout model's figure for the same queue.
Everything is numpy over the replica's samples; nothing loops over iterations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .rollout import RolloutCostParams, replica_seconds
from .rollout_kernels import fifo_start_iterations


@dataclass(frozen=True)
class ReplicaTimeline:
    """A replica's queue from the start of a segment, in replica seconds."""

    samples: np.ndarray
    """Indices of the batch's samples in the replica's FIFO order."""
    start_it: np.ndarray
    """Iteration at which each starts decoding."""
    end_it: np.ndarray
    """Iteration after its last token (start_it + decode tokens)."""
    event_it: np.ndarray
    """Iterations at which the active set changes, ascending, from 0."""
    event_end_s: np.ndarray
    """E at each event iteration: when that iteration ends."""
    slope_s: np.ndarray
    """Seconds per iteration from each event to the next."""
    total_s: float
    """The replica's time for the whole queue (the rollout model's figure)."""

    @property
    def num_iterations(self) -> int:
        return int(self.end_it.max()) if len(self.end_it) else 0

    def iterations_done(self, elapsed_s: float) -> int:
        """Decode iterations completed `elapsed_s` replica seconds after the segment began."""
        last = self.num_iterations
        if last == 0 or elapsed_s < self.event_end_s[0]:
            return 0
        k = int(np.searchsorted(self.event_end_s, elapsed_s, side="right")) - 1
        slope = self.slope_s[k]
        span_end = self.event_it[k + 1] if k + 1 < len(self.event_it) else last
        if slope <= 0.0:
            return int(span_end)
        start = int(self.event_it[k])
        x = min(start + int(np.floor((elapsed_s - self.event_end_s[k]) / slope)), span_end - 1)
        # the division rounds: settle on the last iteration that has really ended
        while x + 1 < span_end and self.event_end_s[k] + slope * (x + 1 - start) <= elapsed_s:
            x += 1
        while x > start and self.event_end_s[k] + slope * (x - start) > elapsed_s:
            x -= 1
        return x + 1

    def end_of_iteration_s(self, iteration: np.ndarray) -> np.ndarray:
        """E(x) for iterations x >= 0 (elementwise)."""
        x = np.asarray(iteration, dtype=np.int64)
        k = np.searchsorted(self.event_it, x, side="right") - 1
        return self.event_end_s[k] + self.slope_s[k] * (x - self.event_it[k])

    def finish_s(self) -> np.ndarray:
        """Replica seconds at which each sample's last token is out (its admission for an empty
        response)."""
        if len(self.samples) == 0:
            return np.zeros(0)
        last = np.maximum(self.end_it - 1, 0)
        return np.where(self.end_it > self.start_it, self.end_of_iteration_s(last), 0.0)


def plan_replica(
    samples: np.ndarray,
    prefill_tokens: np.ndarray,
    decode_tokens: np.ndarray,
    params: RolloutCostParams,
) -> ReplicaTimeline:
    """The timeline of one replica's FIFO queue (samples already decoding come first, with no
    prefill left to pay)."""
    d = np.asarray(decode_tokens, dtype=np.int64)
    q = np.asarray(prefill_tokens, dtype=np.int64)
    start = fifo_start_iterations(d, params.max_concurrent_seqs)
    end = start + d
    total = float(replica_seconds(int(q.sum()), int(end.max(initial=0)), int(d.sum()), params))
    events = np.unique(np.concatenate([[0], start, end]))
    live = events < max(int(end.max(initial=0)), 1)
    events = events[live] if live.any() else events[:1]
    active = np.searchsorted(np.sort(start), events, side="right") - np.searchsorted(
        np.sort(end), events, side="right"
    )
    spans = np.diff(np.append(events, max(int(end.max(initial=0)), int(events[-1]) + 1)))
    active_before = np.concatenate([[0], np.cumsum(active[:-1] * spans[:-1])])
    order = np.argsort(start, kind="stable")
    prefill_upto = np.cumsum(q[order])
    admitted = np.searchsorted(start[order], events, side="right")
    prefill_s = params.prefill_s_per_token * np.where(
        admitted > 0, prefill_upto[np.maximum(admitted - 1, 0)], 0
    )
    a, b = params.decode_base_s_per_iter, params.decode_s_per_active_seq
    end_s = a * (events + 1) + b * (active_before + active) + prefill_s
    return ReplicaTimeline(
        samples=np.asarray(samples, dtype=np.int64),
        start_it=start,
        end_it=end,
        event_it=events.astype(np.int64),
        event_end_s=end_s.astype(np.float64),
        slope_s=(a + b * active).astype(np.float64),
        total_s=total,
    )
