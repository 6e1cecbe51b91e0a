"""Many runs of one context advanced together, step by step, as arrays over the runs.

A sweep's grid runs a policy at many parameter values on the same workload, cluster and costs:
the same stage-time matrices, read at different splits. Where the pipeline is lockstep (`sync`
or `one_step_off`) and the policy has a vectorised form (`vector_policies`), every run of a batch
takes step k together: the stage times of each run's split are gathered from the context's
matrices, every clock advances, the policy decides for all runs in one array operation, and the
runs that resize stall for their move's critical path and carry its background work into the
next training stage.

The arithmetic is the SimPy pipeline's (`twin.pipeline`), operation for operation and in the
same order, and the figures are reduced by the same functions as `simulate()`'s summary, so each
run's figures equal `simulate()`'s to the last bit; tests/twin/test_sweep_batched.py compares
them for every policy kind. Async runs, whose rollout and training interleave as separate
processes, and policies without a vectorised form go through `simulate()`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dynaresize.traces.phases import PipelineMode

from ..config import ScenarioConfig
from ..sim_records import _busy_between
from ..simulation import SimContext
from .vector_policies import Boundary, CandidateMoves, VectorDecider

LOCKSTEP_MODES = (PipelineMode.SYNC, PipelineMode.ONE_STEP_OFF)


MAX_TRAIL_VALUES = 4_000_000
"""Steps times runs one batch keeps a trail of (8 floats each: 256 MB at most); a longer batch
is cut into several."""


def batch_size(num_steps: int) -> int:
    """Runs advanced together at most, for runs of `num_steps` steps."""
    return max(1, MAX_TRAIL_VALUES // max(1, num_steps))


MODELLED_SETTINGS = {
    "pipeline": {"mode", "max_staleness_steps", "in_flight", "resize_strategy"},
    "simulation": {
        "num_steps",
        "seed",
        "thrash_window_steps",
        "observation_window_steps",
        "baseline_allocation",
    },
}
"""The settings of the sections that shape the pipeline which this module follows. A setting
added there later, set away from its default, sends the runs through `simulate()` until this
module models it too."""


def lockstep_supported(config: ScenarioConfig) -> bool:
    """Whether runs of this scenario can be advanced together: a lockstep pipeline, and no
    pipeline or simulation setting this module does not model away from its default."""
    if config.pipeline.mode not in LOCKSTEP_MODES:
        return False
    for section, modelled in MODELLED_SETTINGS.items():
        settings = getattr(config, section)
        for name, info in type(settings).model_fields.items():
            default = info.get_default(call_default_factory=True)
            if name not in modelled and getattr(settings, name) != default:
                return False
    return True


@dataclass(frozen=True)
class BatchFigures:
    """The summary figures of every run of a batch, one entry per run."""

    total_s: np.ndarray
    stall_s: np.ndarray
    """Time the pipeline stalled for resizes (the summary's `resize_time_s`)."""
    num_resizes: np.ndarray
    thrash_count: np.ndarray
    gpu_idle_fraction: np.ndarray
    final_index: np.ndarray
    """Candidate index of the split the run ends on."""


@dataclass
class _Trail:
    """Per-step values every run leaves behind, (num_steps, num_runs) each, for the idle
    accounting at the end (the busy intervals of both roles and the step windows)."""

    step_start: np.ndarray
    step_end: np.ndarray
    allocation: np.ndarray
    rollout_lo: np.ndarray
    rollout_hi: np.ndarray
    train_lo: np.ndarray
    train_hi: np.ndarray
    sync_lo: np.ndarray
    """One_step_off only: the weight sync is a busy span of its own after the training stage."""


class _Batch:
    """The pipeline state of every run: split, clock, pending background work, resizes."""

    def __init__(self, ctx: SimContext, moves: CandidateMoves, num_runs: int) -> None:
        config = ctx.config
        self.moves = moves
        self.num_steps = ctx.step_costs.num_steps
        self.rollout_s = ctx.step_costs.rollout_s
        self.train_s = ctx.step_costs.train_s
        self.sync_s = ctx.step_costs.sync_s
        self.predicted = ctx.predicted_step_s
        self.thrash_window_steps = config.simulation.thrash_window_steps
        self.current = np.full(num_runs, moves.index(config.cluster.initial_allocation))
        self.now = np.zeros(num_runs)
        self.step_start = np.zeros(num_runs)
        self.pending = np.zeros(num_runs, dtype=bool)
        self.pending_floor_s = np.zeros(num_runs)
        self.pending_slowdown_s = np.zeros(num_runs)
        self.last_resize_step = np.full(num_runs, -1)
        self.stall_s = np.zeros(num_runs)
        self.num_resizes = np.zeros(num_runs, dtype=np.int64)
        self.thrash_count = np.zeros(num_runs, dtype=np.int64)
        self.previous_step = np.full(num_runs, -1)
        self.previous_from = np.full(num_runs, -1)
        shape = (self.num_steps, num_runs)
        self.trail = _Trail(
            step_start=np.zeros(shape),
            step_end=np.zeros(shape),
            allocation=np.zeros(shape, dtype=np.int64),
            rollout_lo=np.zeros(shape),
            rollout_hi=np.zeros(shape),
            train_lo=np.zeros(shape),
            train_hi=np.zeros(shape),
            sync_lo=np.zeros(shape),
        )

    def train_duration_s(self, k: int) -> np.ndarray:
        """Training stage of step k on each run's split, a pending resize's work included."""
        train_s = self.train_s[k][self.current]
        if self.pending.any():
            hit = np.flatnonzero(self.pending)
            slowed = train_s[hit] + self.pending_slowdown_s[hit]
            train_s[hit] = np.maximum(slowed, self.pending_floor_s[hit])
            self.pending[:] = False
        return train_s

    def resize(self, k: int, target: np.ndarray) -> None:
        """Runs whose policy chose another split stall for the move's critical path."""
        moving = np.flatnonzero((target >= 0) & (target != self.current))
        if not len(moving):
            return
        before, after = self.current[moving], target[moving]
        stall_s = self.moves.critical_s[before, after]
        self.now[moving] = self.now[moving] + stall_s
        self.stall_s[moving] = self.stall_s[moving] + stall_s
        self.current[moving] = after
        self.last_resize_step[moving] = k
        self.pending[moving] = True
        self.pending_floor_s[moving] = self.moves.background_tail_s[before, after]
        self.pending_slowdown_s[moving] = self.moves.slowdown_s[before, after]
        # Only a move with phases leaves rows in the resize table, which the summary counts.
        recorded = self.moves.recorded[before, after]
        runs, before, after = moving[recorded], before[recorded], after[recorded]
        undone = (after == self.previous_from[runs]) & (
            k - self.previous_step[runs] <= self.thrash_window_steps
        )
        self.thrash_count[runs] += undone
        self.num_resizes[runs] += 1
        self.previous_from[runs] = before
        self.previous_step[runs] = k


def run_lockstep(ctx: SimContext, moves: CandidateMoves, decider: VectorDecider) -> BatchFigures:
    """Every run of `decider` over the context, together; their summary figures."""
    batch = _Batch(ctx, moves, decider.num_runs)
    n = batch.num_steps
    trail = batch.trail
    one_step_off = ctx.config.pipeline.mode is PipelineMode.ONE_STEP_OFF
    if one_step_off:
        batch_rollout_s = batch.rollout_s[0][batch.current]
        trail.rollout_hi[0] = batch.now + batch_rollout_s
        batch.now = trail.rollout_hi[0].copy()
    for k in range(n):
        train_s = batch.train_duration_s(k)
        current = batch.current
        sync_s = batch.sync_s[current]
        start = batch.now
        if one_step_off:
            rollout_s = batch_rollout_s
            if k + 1 < n:
                batch_rollout_s = batch.rollout_s[k + 1][current]
                trail.rollout_lo[k + 1] = start
                trail.rollout_hi[k + 1] = start + batch_rollout_s
            else:
                batch_rollout_s = np.zeros_like(start)
            batch.now = start + (np.maximum(train_s, batch_rollout_s) + sync_s)
            trail.train_lo[k] = start
            trail.train_hi[k] = start + train_s
            trail.sync_lo[k] = batch.now - sync_s
        else:
            rollout_s = batch.rollout_s[k][current]
            trail.rollout_lo[k] = start
            trail.rollout_hi[k] = trained_from = start + rollout_s
            batch.now = trained_from + (train_s + sync_s)
            trail.train_lo[k] = trained_from
            trail.train_hi[k] = batch.now
        trail.step_start[k] = batch.step_start
        trail.step_end[k] = batch.now
        trail.allocation[k] = current
        if k + 1 < n:
            since = np.where(batch.last_resize_step >= 0, k - batch.last_resize_step, -1)
            at = Boundary(
                step=k,
                remaining_steps=n - k - 1,
                current=current,
                rollout_s=rollout_s,
                train_s=train_s,
                steps_since_resize=since,
                predicted_step_s=batch.predicted[k],
            )
            batch.resize(k, decider.decide(at))
        batch.step_start = batch.now.copy()
    total_gpus = ctx.config.cluster.total_gpus
    return BatchFigures(
        total_s=batch.now,
        stall_s=batch.stall_s,
        num_resizes=batch.num_resizes,
        thrash_count=batch.thrash_count,
        gpu_idle_fraction=_idle_fractions(trail, moves, batch, total_gpus, one_step_off),
        final_index=batch.current,
    )


def _idle_fractions(
    trail: _Trail, moves: CandidateMoves, batch: _Batch, total_gpus: int, one_step_off: bool
) -> np.ndarray:
    """Each run's share of idle GPU-seconds, by the summary's own reduction: busy seconds of
    each role inside each step window (from the same intervals the pipeline records, in the same
    order), idle GPU-seconds per step, their sum, and the resize stalls on every GPU."""
    num_runs = len(batch.now)
    columns = (
        trail.step_start,
        trail.step_end,
        trail.allocation,
        trail.rollout_lo,
        trail.rollout_hi,
        trail.train_lo,
        trail.train_hi,
        trail.sync_lo,
    )
    start, end, allocation, roll_lo, roll_hi, train_lo, train_hi, sync_lo = (
        np.ascontiguousarray(c.T) for c in columns
    )
    out = np.zeros(num_runs)
    for r in range(num_runs):
        lo, hi = start[r], end[r]
        step_s = hi - lo
        rollout = np.stack([roll_lo[r], roll_hi[r]], axis=1)
        if one_step_off:
            # training then sync, both on the training GPUs: two spans per step, in order
            train = np.stack([train_lo[r], train_hi[r], sync_lo[r], hi], axis=1).reshape(-1, 2)
        else:
            train = np.stack([train_lo[r], train_hi[r]], axis=1)
        busy_train = _busy_between(train, lo, hi)
        busy_rollout = _busy_between(rollout, lo, hi)
        split = allocation[r]
        idle_train = np.maximum(step_s - busy_train, 0.0) * moves.train_gpus[split]
        idle_rollout = np.maximum(step_s - busy_rollout, 0.0) * moves.rollout_gpus[split]
        idle_gpu_s = float((idle_train + idle_rollout).sum())
        idle_gpu_s += float(batch.stall_s[r]) * total_gpus
        gpu_s = total_gpus * float(batch.now[r])
        out[r] = float(np.clip(idle_gpu_s / gpu_s, 0.0, 1.0)) if gpu_s > 0 else 0.0
    return out
