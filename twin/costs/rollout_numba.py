"""The numba kernel of `rollout_kernels`: per-chunk counts in one compiled pass.

Kept in its own module, at module level, so that numba's on-disk cache (`cache=True`) finds it
again in the next process: only the first run on a machine pays the compilation. Importing this
module imports numba; `rollout_kernels` does so on first use.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def sift_down(heap: np.ndarray, start: int, size: int) -> None:
    """Move heap[start] down until both children are no smaller (min-heap of `size` items)."""
    i = start
    item = heap[start]
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] >= item:
            break
        heap[i] = heap[child]
        i = child
    heap[i] = item


@numba.njit(cache=True, nogil=True)
def counts(prompt, response, starts, sizes, limited, concurrency):
    """Prompt sum, makespan and response sum of every chunk.

    The makespan is FIFO list scheduling of the chunk's response lengths on `concurrency` slots:
    a min-heap of slot finish times whose root (the earliest-free slot) takes each next sample.
    """
    num_chunks = len(sizes)
    prompt_sum = np.zeros(num_chunks, dtype=np.int64)
    makespan = np.zeros(num_chunks, dtype=np.int64)
    response_sum = np.zeros(num_chunks, dtype=np.int64)
    heap = np.empty(max(concurrency, 1), dtype=np.int64)
    for c in range(num_chunks):
        lo = starts[c]
        hi = lo + sizes[c]
        total_prompt = 0
        total_response = 0
        for j in range(lo, hi):
            total_prompt += prompt[j]
        prompt_sum[c] = total_prompt
        if not limited or sizes[c] <= concurrency:
            longest = 0
            for j in range(lo, hi):
                length = response[j]
                total_response += length
                longest = max(longest, length)
            makespan[c] = longest
            response_sum[c] = total_response
            continue
        for k in range(concurrency):
            heap[k] = response[lo + k]
            total_response += heap[k]
        for k in range(concurrency // 2 - 1, -1, -1):  # heapify in O(C)
            sift_down(heap, k, concurrency)
        for j in range(lo + concurrency, hi):
            length = response[j]
            total_response += length
            heap[0] += length  # the earliest-free slot takes the next sample
            sift_down(heap, 0, concurrency)
        longest = 0
        for k in range(concurrency):
            longest = max(longest, heap[k])
        makespan[c] = longest
        response_sum[c] = total_response
    return prompt_sum, makespan, response_sum


@numba.njit(cache=True, nogil=True)
def fifo_starts(lengths, concurrency):
    """Decode iteration at which each sample of one replica's FIFO queue is admitted, on
    `concurrency` slots: the same min-heap as `counts`, reading the root before it takes the
    sample."""
    n = len(lengths)
    starts = np.zeros(n, dtype=np.int64)
    if n <= concurrency:
        return starts
    heap = np.empty(concurrency, dtype=np.int64)
    for k in range(concurrency):
        heap[k] = lengths[k]
    for k in range(concurrency // 2 - 1, -1, -1):
        sift_down(heap, k, concurrency)
    for j in range(concurrency, n):
        starts[j] = heap[0]
        heap[0] += lengths[j]
        sift_down(heap, 0, concurrency)
    return starts
