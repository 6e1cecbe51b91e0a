"""The numba kernel of `rollout_kernels`: per-chunk counts in one compiled pass.

Kept in its own module, at module level, so that numba's on-disk cache (`cache=True`) finds it
again in the next process: only the first run on a machine pays the compilation. Importing this
module imports numba; `rollout_kernels` does so on first use.
"""

from __future__ import annotations

import numba
import numpy as np

_KEY_LIMIT = np.int64(1) << np.int64(62)
"""Keys of the tournament tree stay below this (sign bit and one spare bit kept clear)."""


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
def tree_shape(concurrency: int) -> tuple[int, int]:
    """(leaves, index bits) of the tournament tree over `concurrency` slots: leaves a power of
    two, the bits that hold a leaf's index in the low end of a key."""
    leaves = 1
    bits = 0
    while leaves < concurrency:
        leaves *= 2
        bits += 1
    return leaves, bits


@numba.njit(cache=True, nogil=True)
def tree_makespan(response, lo, hi, concurrency, tree, leaves, bits):
    """FIFO list-scheduling makespan of response[lo:hi] on `concurrency` slots, by a tournament
    tree: every node holds the least key below it, a key being a slot's finish time shifted left
    by `bits` with the slot's index in the low bits. Giving the next sample to the root's slot
    raises one leaf and recomputes the minima on its path, one comparison a level without
    branches (a binary heap's sift-down takes two data-dependent branches a level, and the
    processor mispredicts about half of them). Which of two tied slots takes a sample does not
    change the multiset of finish times, so the makespan equals the heap's."""
    for k in range(leaves):
        tree[leaves + k] = (response[lo + k] << bits) | k if k < concurrency else _KEY_LIMIT
    for node in range(leaves - 1, 0, -1):
        tree[node] = min(tree[2 * node], tree[2 * node + 1])
    root = tree[1]
    for j in range(lo + concurrency, hi):
        node = leaves + (root & (leaves - 1))
        key = root + (response[j] << bits)
        tree[node] = key
        while node > 1:
            key = min(key, tree[node ^ 1])
            node >>= 1
            tree[node] = key
        root = key  # the new root, kept in a register for the next sample
    longest = 0
    for k in range(concurrency):
        longest = max(longest, tree[leaves + k] >> bits)
    return longest


@numba.njit(cache=True, nogil=True)
def heap_makespan(response, lo, hi, concurrency, heap):
    """The same makespan by a binary min-heap of slot finish times (no key packing): for
    chunks whose lengths are too large for `tree_makespan`'s keys."""
    for k in range(concurrency):
        heap[k] = response[lo + k]
    for k in range(concurrency // 2 - 1, -1, -1):  # heapify in O(C)
        sift_down(heap, k, concurrency)
    for j in range(lo + concurrency, hi):
        heap[0] += response[j]  # the earliest-free slot takes the next sample
        sift_down(heap, 0, concurrency)
    longest = 0
    for k in range(concurrency):
        longest = max(longest, heap[k])
    return longest


@numba.njit(cache=True, nogil=True)
def counts(prompt, response, starts, sizes, limited, concurrency):
    """Prompt sum, makespan and response sum of every chunk.

    The makespan is FIFO list scheduling of the chunk's response lengths on `concurrency` slots:
    each next sample goes to the earliest-free slot (`tree_makespan`).
    """
    num_chunks = len(sizes)
    prompt_sum = np.zeros(num_chunks, dtype=np.int64)
    makespan = np.zeros(num_chunks, dtype=np.int64)
    response_sum = np.zeros(num_chunks, dtype=np.int64)
    slots = max(concurrency, 1)
    leaves, bits = tree_shape(slots)
    tree = np.empty(2 * leaves, dtype=np.int64)
    heap = np.empty(slots, dtype=np.int64)
    key_room = _KEY_LIMIT >> bits
    for c in range(num_chunks):
        lo = starts[c]
        hi = lo + sizes[c]
        # Separate loops over the chunk: each is a plain reduction the compiler vectorises.
        total_prompt = 0
        for j in range(lo, hi):
            total_prompt += prompt[j]
        total_response = 0
        for j in range(lo, hi):
            total_response += response[j]
        prompt_sum[c] = total_prompt
        response_sum[c] = total_response
        if not limited or sizes[c] <= concurrency:
            longest = 0
            for j in range(lo, hi):
                longest = max(longest, response[j])
            makespan[c] = longest
        elif 0 <= total_response < key_room:  # every finish time fits a key
            makespan[c] = tree_makespan(response, lo, hi, concurrency, tree, leaves, bits)
        else:
            makespan[c] = heap_makespan(response, lo, hi, concurrency, heap)
    return prompt_sum, makespan, response_sum


@numba.njit(cache=True, nogil=True)
def fifo_starts(lengths, concurrency):
    """Decode iteration at which each sample of one replica's FIFO queue is admitted, on
    `concurrency` slots: the same min-heap as `heap_makespan`, reading the root before it
    takes the sample."""
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
