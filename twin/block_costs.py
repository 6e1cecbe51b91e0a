"""The step costs of a context, built from its workload a block of steps at a time.

Every quantity here is per step (stage times on every candidate, tokens, length statistics),
so a block's rows are the whole run's rows for its steps: a held workload (a trace's) is costed
a block at a time, so the per-sample temporaries are those of one block, and a generated
workload too large to hold cheaply is drawn a block at a time
(`traces.synthetic.workload_blocks`), each block's per-sample arrays let go once its steps are
costed, and the result is the same, bit for bit, as costing the whole workload at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dynaresize.traces.produced_ahead import produced_ahead
from dynaresize.traces.synthetic import BLOCK_SAMPLES, workload_blocks
from dynaresize.traces.workload import Workload
from dynaresize.traces.workload_stream import WorkloadStream

from ._lazy import LazyModule
from .config import ScenarioConfig
from .costs import CostModels
from .step_costs import (
    StepCosts,
    stage_time_components,
    static_step_times,
    tokens_and_response_sums,
)

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = LazyModule("pandas")  # the step statistics are built after the simulation's imports

__all__ = [
    "CONTEXT_BLOCK_SAMPLES",
    "BlockSink",
    "block_costs",
    "holds_samples",
    "step_costs_by_block",
]

CONTEXT_BLOCK_SAMPLES = BLOCK_SAMPLES
"""Samples of a generated workload the context builds costs from at a time; a step-level run
with more than this holds one block at a time, never the whole workload."""


def _sorted_rows(per_step: np.ndarray, row_sums: np.ndarray) -> np.ndarray:
    """Each row sorted; in int32 when the lengths fit (sorting half the bytes is twice as fast),
    the int32 copy sorted in place (a second fresh array would cost its pages' first touch).
    Lengths are never negative and their sums stay far inside 64-bit integers (the workloads'
    bounds, `config.MAX_TOKENS_PER_SAMPLE`), so every length fits where every row's sum does:
    the sums the step statistics have anyway answer it without a pass over the lengths."""
    if per_step.size and row_sums.max() < np.iinfo(np.int32).max:
        rows = per_step.astype(np.int32)
        rows.sort(axis=1)
        return rows
    return np.sort(per_step, axis=1)


def _percentile_of_sorted(rows: np.ndarray, q: float) -> np.ndarray:
    """numpy's default (linear) percentile of each sorted row, by the same interpolation."""
    position = q / 100.0 * (rows.shape[1] - 1)
    lo = int(np.floor(position))
    hi = min(lo + 1, rows.shape[1] - 1)
    t = position - lo
    a, b = rows[:, lo].astype(np.float64), rows[:, hi].astype(np.float64)
    return b - (b - a) * (1.0 - t) if t >= 0.5 else a + (b - a) * t


def _step_stats(
    workload: Workload, tokens: np.ndarray, response_sums: np.ndarray | None
) -> pd.DataFrame:
    """Samples, tokens and response-length statistics of every step; `response_sums` (from
    `tokens_and_response_sums`) given exactly where the steps are of one size."""
    sizes = np.diff(workload.step_offsets)
    n = workload.num_steps
    if response_sums is not None and sizes[0] > 0:
        per_step = workload.response_tokens.reshape(n, int(sizes[0]))
        ordered = _sorted_rows(per_step, response_sums)
        mean = response_sums / per_step.shape[1]
        p50, p99 = _percentile_of_sorted(ordered, 50), _percentile_of_sorted(ordered, 99)
        longest = ordered[:, -1].astype(np.float64)
    else:
        response = workload.response_tokens.astype(np.float64)
        mean, p50, p99, longest = (np.zeros(n) for _ in range(4))
        for k in range(n):
            r = response[workload.step_offsets[k] : workload.step_offsets[k + 1]]
            if len(r):
                mean[k], longest[k] = r.mean(), r.max()
                p50[k], p99[k] = np.percentile(r, [50, 99])
    return pd.DataFrame(
        {
            "num_samples": sizes.astype(np.int64),
            "tokens": tokens.astype(np.int64),
            "response_len_mean": mean,
            "response_len_p50": p50,
            "response_len_p99": p99,
            "response_len_max": longest,
        }
    )


def held_blocks(held: Workload, block_samples: int) -> list[tuple[int, Workload]]:
    """A held workload as blocks of whole steps of about `block_samples` samples: (first step,
    block). Only a workload whose steps all hold the same number of samples is cut (its blocks
    then take the same path through `_step_stats` as the whole); any other is one block."""
    sizes = np.diff(held.step_offsets)
    n = held.num_steps
    if n == 0 or not np.all(sizes == sizes[0]) or sizes[0] == 0:
        return [(0, held)]
    steps_per_block = max(1, block_samples // int(sizes[0]))
    if steps_per_block >= n:
        return [(0, held)]
    return [
        (first, held.slice_steps(first, min(first + steps_per_block, n)))
        for first in range(0, n, steps_per_block)
    ]


def holds_samples(config: ScenarioConfig) -> bool:
    """Whether a run of `config` reads every sample's lengths while it runs (lending and
    partial rollout go sample by sample); the others read only step-level costs."""
    return bool(config.pipeline.lending or config.pipeline.partial_rollout)


@dataclass(frozen=True)
class _BlockCosts:
    """What the context keeps of one block of steps once its samples are let go."""

    tokens: np.ndarray
    rollout_s: np.ndarray
    train_s: np.ndarray
    sync_s: np.ndarray
    stats: pd.DataFrame


def block_costs(
    config: ScenarioConfig, costs: CostModels, block: Workload, *, starts_run: bool
) -> _BlockCosts:
    tokens, response_sums = tokens_and_response_sums(block)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        rollout, train, sync = stage_time_components(
            block,
            candidates=tuple(config.cluster.candidate_allocations),
            cluster=config.cluster,
            model=config.model,
            costs=costs,
            tokens=tokens,
            starts_run=starts_run,
        )
    return _BlockCosts(tokens, rollout, train, sync, _step_stats(block, tokens, response_sums))


BlockSink = Callable[[int, Workload], None]
"""Called with each block of the workload, (first step, block), in order, as it is costed."""


def step_costs_by_block(
    config: ScenarioConfig,
    costs: CostModels,
    held: Workload | WorkloadStream | None,
    seed: int,
    *,
    block_sink: BlockSink | None = None,
) -> tuple[StepCosts, np.ndarray, pd.DataFrame]:
    """Step costs, tokens and statistics of every step: of the held workload at once, or of the
    generated one or a trace's streamed one a block of steps at a time, each block's samples let
    go once its steps are costed (every quantity here is per step, so the blocks' rows are the
    whole run's rows).
    `block_sink` sees every block too (a writer of the samples then needs no second draw)."""

    def seen(blocks: Iterable[tuple[int, Workload]]) -> Iterator[tuple[int, Workload]]:
        for first, block in blocks:
            if block_sink is not None:
                block_sink(first, block)
            yield first, block

    blocks: Iterable[tuple[int, Workload]]
    if isinstance(held, WorkloadStream):
        # Reading and decoding a block (pyarrow) lets go of the interpreter too: the next block
        # is read while this one is costed.
        blocks = produced_ahead(held.blocks(CONTEXT_BLOCK_SAMPLES))
    elif held is not None:
        blocks = held_blocks(held, CONTEXT_BLOCK_SAMPLES)
    else:
        # Costing a block (the rollout kernels, sorting) lets go of the interpreter for most
        # of its work: the next block is drawn meanwhile, on a thread of its own (one more
        # block in memory).
        blocks = produced_ahead(
            workload_blocks(
                config.workload,
                config.simulation.num_steps,
                seed,
                block_samples=CONTEXT_BLOCK_SAMPLES,
            )
        )
    parts = [
        block_costs(config, costs, block, starts_run=first == 0) for first, block in seen(blocks)
    ]
    rollout = np.concatenate([p.rollout_s for p in parts]) if len(parts) > 1 else parts[0].rollout_s
    train = np.concatenate([p.train_s for p in parts]) if len(parts) > 1 else parts[0].train_s
    tokens = np.concatenate([p.tokens for p in parts]) if len(parts) > 1 else parts[0].tokens
    stats = (
        pd.concat([p.stats for p in parts], ignore_index=True) if len(parts) > 1 else parts[0].stats
    )
    sync = parts[0].sync_s
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        step_s = static_step_times(rollout, train, sync, config.pipeline)
    step_costs = StepCosts(
        candidates=tuple(config.cluster.candidate_allocations),
        rollout_s=rollout,
        train_s=train,
        sync_s=sync,
        step_s=step_s,
    )
    return step_costs, tokens, stats
