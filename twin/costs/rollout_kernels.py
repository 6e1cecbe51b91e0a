"""Fast integer kernels behind `rollout_stage_s_many`: per-replica counts for every step at once.

For each (step, replica) chunk of samples the rollout model needs three integers: the prompt
tokens it prefills, the decode iterations it runs (the makespan `T` of FIFO list scheduling of its
response lengths on `C` slots) and the sum over iterations of active sequences (`sum(L)`). Being
integers, they come out the same from any correct algorithm, so the two backends here give
identical results:

- `numba`: one compiled pass over all chunks; `T` by a tournament tree of slot free times
  (O(n log C) per chunk, without data-dependent branches). Compiled on first use and cached
  on disk (`cache=True`).
- `numpy`: the chunks as rows of a zero-padded matrix; `T` by assigning column j to each row's
  least-loaded slot, all rows at once.

numba takes about a second to load in a fresh process, and is about ten times as fast as numpy
per sample under a KV limit (7 ms against 69 ms for 512,000 samples on three replicas, 2-core
machine, 2026-12-07), so it pays only on large workloads: the default picks numba for a call of at
least `NUMBA_MIN_SAMPLES` samples or once the kernel is loaded in this process, numpy otherwise
(a small run, the example on the command line, starts without loading numba at all).
DYNARESIZE_NO_NUMBA=1 asks for numpy whatever the size.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import numpy as np

from dynaresize.traces.numba_switch import NO_NUMBA_ENV as NO_NUMBA_ENV
from dynaresize.traces.numba_switch import numba_disabled as numba_disabled


class KernelBackend(str, Enum):
    NUMBA = "numba"
    NUMPY = "numpy"


@dataclass(frozen=True)
class ReplicaCounts:
    """Integer counts per (step, replica), flattened step-major: index = step * R + replica."""

    prompt_tokens_total: np.ndarray
    decode_iterations: np.ndarray
    active_seq_iterations: np.ndarray


NUMBA_MIN_SAMPLES = 250_000
"""Samples in one call from which numba is used: there numpy takes about 0.05 s a call (four
calls a context on four candidates), so a context or two repay numba's load."""
_loaded_kernel: Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
"""The numba kernel once this process has loaded it."""


def default_backend(num_samples: int | None = None) -> KernelBackend:
    """numpy where DYNARESIZE_NO_NUMBA=1 asks for it; otherwise numba for a call of unknown
    size, of at least NUMBA_MIN_SAMPLES samples, or once the kernel is loaded; numpy below."""
    if numba_disabled():
        return KernelBackend.NUMPY
    if num_samples is None or num_samples >= NUMBA_MIN_SAMPLES or _loaded_kernel is not None:
        return KernelBackend.NUMBA
    return KernelBackend.NUMPY


def chunk_bounds(step_offsets: np.ndarray, num_replicas: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and size of every (step, replica) chunk, step-major, by the array_split rule."""
    if num_replicas < 1:
        raise ValueError(f"num_replicas must be at least 1, got {num_replicas}")
    offsets = np.asarray(step_offsets, dtype=np.int64)
    num_samples = np.diff(offsets)
    base, extra = np.divmod(num_samples, num_replicas)
    replica = np.arange(num_replicas, dtype=np.int64)
    starts = offsets[:-1, None] + replica * base[:, None] + np.minimum(replica, extra[:, None])
    sizes = base[:, None] + (replica < extra[:, None])
    return starts.ravel(), sizes.ravel()


def replica_counts(
    prompt_tokens: np.ndarray,
    response_tokens: np.ndarray,
    step_offsets: np.ndarray,
    *,
    num_replicas: int,
    max_concurrent_seqs: int | None,
    backend: KernelBackend | None = None,
) -> ReplicaCounts:
    """Counts of every (step, replica) chunk of a ragged workload."""
    if max_concurrent_seqs is not None and max_concurrent_seqs < 1:
        raise ValueError(f"max_concurrent_seqs must be at least 1, got {max_concurrent_seqs}")
    prompt = np.ascontiguousarray(prompt_tokens, dtype=np.int64)
    response = np.ascontiguousarray(response_tokens, dtype=np.int64)
    starts, sizes = chunk_bounds(step_offsets, num_replicas)
    backend = backend or default_backend(len(response))
    if backend is KernelBackend.NUMBA:
        kernel = _numba_kernel()
        limited = max_concurrent_seqs is not None
        return ReplicaCounts(
            *kernel(prompt, response, starts, sizes, limited, max_concurrent_seqs or 1)
        )
    return ReplicaCounts(
        _segment_sums(prompt, starts, sizes),
        _makespans_numpy(response, starts, sizes, max_concurrent_seqs),
        _segment_sums(response, starts, sizes),
    )


def replica_counts_many(
    prompt_tokens: np.ndarray,
    response_tokens: np.ndarray,
    step_offsets: np.ndarray,
    *,
    replica_counts_wanted: tuple[int, ...],
    max_concurrent_seqs: int | None,
    backend: KernelBackend | None = None,
) -> dict[int, ReplicaCounts]:
    """`replica_counts` for several replica counts of one workload (the candidates' splits),
    equal to calling it once per count. The compiled backend schedules the chunks of every
    count in one pass, chunks that start at the same sample sharing their schedule and sums
    (`rollout_grouped.grouped_counts`)."""
    if max_concurrent_seqs is not None and max_concurrent_seqs < 1:
        raise ValueError(f"max_concurrent_seqs must be at least 1, got {max_concurrent_seqs}")
    counts = tuple(dict.fromkeys(replica_counts_wanted))
    if not counts:
        return {}
    bounds = [chunk_bounds(step_offsets, r) for r in counts]
    backend = backend or default_backend(len(response_tokens))
    if max_concurrent_seqs is None or all(
        len(sizes) == 0 or sizes.max() <= max_concurrent_seqs for _, sizes in bounds
    ):
        # No chunk waits for a slot: its makespan is its longest response, and every count's
        # counts are sums and maxima over runs of samples, shared as `_unqueued_counts` says.
        return _unqueued_counts(
            np.ascontiguousarray(prompt_tokens, dtype=np.int64),
            np.ascontiguousarray(response_tokens, dtype=np.int64),
            dict(zip(counts, bounds, strict=True)),
            backend,
        )
    if backend is not KernelBackend.NUMBA or len(counts) < 2:
        return {
            r: replica_counts(
                prompt_tokens,
                response_tokens,
                step_offsets,
                num_replicas=r,
                max_concurrent_seqs=max_concurrent_seqs,
                backend=backend,
            )
            for r in counts
        }
    prompt = np.ascontiguousarray(prompt_tokens, dtype=np.int64)
    response = np.ascontiguousarray(response_tokens, dtype=np.int64)
    starts = np.concatenate([b[0] for b in bounds])
    sizes = np.concatenate([b[1] for b in bounds])
    order = np.lexsort((sizes, starts))
    _numba_kernel()  # marks the compiled kernels as loaded in this process
    from . import rollout_grouped

    prompt_sums, makespans, response_sums = rollout_grouped.grouped_counts(
        prompt, response, starts, sizes, order, max_concurrent_seqs
    )
    result: dict[int, ReplicaCounts] = {}
    first = 0
    for r, (chunk_starts, _) in zip(counts, bounds, strict=True):
        part = slice(first, first + len(chunk_starts))
        result[r] = ReplicaCounts(prompt_sums[part], makespans[part], response_sums[part])
        first = part.stop
    return result


def _unqueued_counts(
    prompt: np.ndarray,
    response: np.ndarray,
    bounds: dict[int, tuple[np.ndarray, np.ndarray]],
    backend: KernelBackend,
) -> dict[int, ReplicaCounts]:
    """Counts of chunks that never queue (makespan = longest response), for several replica
    counts at once.

    Every count's chunks tile the samples, so the starts of all of them cut the samples into
    runs with no chunk boundary of any count inside: each run's sums and maximum are taken
    once (three reductions over the samples, not three per count), and a chunk's counts are
    those of its runs combined. Integer sums and maxima, so the same as reducing each chunk,
    on either backend (compiled: `rollout_grouped.unqueued_counts`; numpy: `reduceat`).
    """
    n = len(response)
    cuts = np.sort(np.concatenate([starts for starts, _ in bounds.values()]))
    # Each start once (sorted, a plain comparison is cheaper than `np.unique`'s hashing); a
    # chunk that starts at the end is empty.
    cuts = cuts[np.concatenate(([True], cuts[1:] != cuts[:-1])) & (cuts < n)]
    if backend is KernelBackend.NUMBA:
        _numba_kernel()  # marks the compiled kernels as loaded in this process
        from . import rollout_grouped

        every_start = np.concatenate([starts for starts, _ in bounds.values()])
        every_size = np.concatenate([sizes for _, sizes in bounds.values()])
        values = rollout_grouped.unqueued_counts(prompt, response, cuts, every_start, every_size)
        result: dict[int, ReplicaCounts] = {}
        first = 0
        for r, (chunk_starts, _) in bounds.items():
            part = slice(first, first + len(chunk_starts))
            result[r] = ReplicaCounts(*(v[part] for v in values))
            first = part.stop
        return result
    if n:
        run_prompt = np.add.reduceat(prompt, cuts)
        run_response = np.add.reduceat(response, cuts)
        # The kernels' maximum starts from 0 (an empty chunk's makespan).
        run_longest = np.maximum(np.maximum.reduceat(response, cuts), 0)
    result = {}
    for r, (starts, sizes) in bounds.items():
        columns = [np.zeros(len(sizes), dtype=np.int64) for _ in range(3)]
        filled = np.flatnonzero(sizes)
        if len(filled):
            # The filled chunks tile the samples in order: each is the runs from its first one
            # up to the next filled chunk's first.
            first_run = np.searchsorted(cuts, starts[filled])
            columns[0][filled] = np.add.reduceat(run_prompt, first_run)
            columns[1][filled] = np.maximum.reduceat(run_longest, first_run)
            columns[2][filled] = np.add.reduceat(run_response, first_run)
        result[r] = ReplicaCounts(*columns)
    return result


def _segment_sums(values: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    cumulative = np.concatenate([[0], np.cumsum(values)])
    return cumulative[starts + sizes] - cumulative[starts]


def _padded_rows(
    values: np.ndarray, starts: np.ndarray, sizes: np.ndarray, width: int
) -> np.ndarray:
    """Chunks as rows of a (num_chunks, width) matrix, zero past each chunk's end."""
    column = np.arange(width, dtype=np.int64)
    inside = column[None, :] < sizes[:, None]
    index = np.where(inside, starts[:, None] + column[None, :], 0)
    return np.where(inside, values[index] if len(values) else 0, 0)


def _makespans_numpy(
    response: np.ndarray, starts: np.ndarray, sizes: np.ndarray, max_concurrent_seqs: int | None
) -> np.ndarray:
    """FIFO list-scheduling makespan per chunk, all chunks advanced together.

    Zero padding is harmless: a zero-length job put on the least-loaded slot changes no slot's
    finish time beyond what it was.
    """
    width = int(sizes.max()) if len(sizes) else 0
    makespans = np.zeros(len(sizes), dtype=np.int64)
    if width == 0:
        return makespans
    lengths = _padded_rows(response, starts, sizes, width)
    if max_concurrent_seqs is None or width <= max_concurrent_seqs:
        return lengths.max(axis=1)
    short = sizes <= max_concurrent_seqs
    makespans[short] = lengths[short].max(axis=1)
    long_rows = np.flatnonzero(~short)
    queue = lengths[long_rows]
    slots = queue[:, :max_concurrent_seqs].copy()
    row = np.arange(len(long_rows))
    for j in range(max_concurrent_seqs, width):
        least = np.argmin(slots, axis=1)
        slots[row, least] += queue[:, j]
    makespans[long_rows] = slots.max(axis=1)
    return makespans


def fifo_start_iterations(
    lengths: np.ndarray, max_concurrent_seqs: int | None, *, backend: KernelBackend | None = None
) -> np.ndarray:
    """Decode iteration at which each sample of one replica's FIFO queue is admitted (int64):
    the first `C` at once, each later one into the slot that frees first. The schedule whose
    makespan `replica_counts` returns, sample by sample."""
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    if max_concurrent_seqs is None or len(lengths) <= max_concurrent_seqs:
        return np.zeros(len(lengths), dtype=np.int64)
    if (backend or default_backend()) is KernelBackend.NUMBA:
        from . import rollout_numba

        return rollout_numba.fifo_starts(lengths, max_concurrent_seqs)
    slots = lengths[:max_concurrent_seqs].tolist()
    heapq.heapify(slots)
    starts = np.zeros(len(lengths), dtype=np.int64)
    for j in range(max_concurrent_seqs, len(lengths)):
        free = slots[0]
        starts[j] = free
        heapq.heapreplace(slots, free + int(lengths[j]))
    return starts


def _numba_kernel() -> Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The compiled kernel. Imported on first use: numba is slow to load."""
    global _loaded_kernel
    if _loaded_kernel is None:
        from . import rollout_numba

        _loaded_kernel = rollout_numba.counts
    return _loaded_kernel
