"""The numba kernels behind `replica_counts_many`: the counts of several replica counts' chunks
in one pass. Where no chunk waits for a slot (`unqueued_counts`), each run of samples between
two chunk starts is reduced once; under a KV limit (`grouped_counts`), chunks that start at the
same sample share their schedule.

A chunk is a prefix of every longer chunk that starts where it does (the replica counts of
different candidates split a step at some of the same samples, at its first sample always), and
FIFO scheduling of a prefix is the start of the longer schedule: so each start (a group of
chunks) is scheduled once, up to its longest chunk, and a chunk's counts are read on the way:
the running sums, and as its makespan the latest finish time given so far (a slot's finish times
only grow, so the latest one given is its last).

The schedule is `rollout_numba.tree_makespan`'s tournament tree. One update waits on the one
before it (the root it reads is the one the previous sample left), so two groups of like length
are scheduled together, their updates interleaved, the processor working on one tree while the
other's update is in flight. Kept apart from `rollout_numba` (the single-chunk kernels) and, like
it, at module level for numba's disk cache.
"""

from __future__ import annotations

import numba
import numpy as np

from .rollout_numba import _KEY_LIMIT, heap_makespan, tree_shape


@numba.njit(cache=True, nogil=True)
def _head(samples, lo, concurrency, tree, shape, chunks, h, end, out):
    """The first samples of a group (chunks `order[h:end]` of `chunks = (sizes, order)`, by
    size), each into a slot of its own, up to `concurrency` or the longest chunk: the counts of
    the chunks that end among them, then, where the group goes on past the slots, the tree over
    them. Returns the next chunk and the group's state (root, latest key, prompt and response
    sums) for `_advance`. `samples`: the (prompt, response) lengths."""
    prompt, response = samples
    sizes, order = chunks
    leaves, bits = shape
    prompt_sum, makespan, response_sum = out
    while h < end and sizes[order[h]] == 0:  # empty chunks: all-zero counts
        h += 1
    longest_chunk = sizes[order[end - 1]]
    head = min(longest_chunk, concurrency)
    total_prompt = 0
    total_response = 0
    longest = 0
    k = 0
    while k < head:
        stop = min(sizes[order[h]], head)  # to where the next chunk ends: a loop without branches
        for j in range(k, stop):
            length = response[lo + j]
            total_prompt += prompt[lo + j]
            total_response += length
            longest = max(longest, length)
            tree[leaves + j] = (length << bits) | j
        k = stop
        while h < end and sizes[order[h]] == k:
            c = order[h]
            prompt_sum[c] = total_prompt
            response_sum[c] = total_response
            makespan[c] = longest
            h += 1
    root = 0
    if longest_chunk > concurrency:  # the leaves past the slots hold _KEY_LIMIT throughout
        for node in range(leaves - 1, 0, -1):
            tree[node] = min(tree[2 * node], tree[2 * node + 1])
        root = tree[1]
    return h, (root, longest << bits, total_prompt, total_response)


@numba.njit(cache=True, nogil=True)
def _advance(samples, lo, j0, j1, tree, shape, state):
    """Samples j0..j1 of the group at `lo` into its tree, each to the slot that frees first."""
    prompt, response = samples
    leaves, bits = shape
    root, latest, total_prompt, total_response = state
    mask = leaves - 1
    for j in range(lo + j0, lo + j1):
        length = response[j]
        total_prompt += prompt[j]
        total_response += length
        node = leaves + (root & mask)
        key = root + (length << bits)
        latest = max(latest, key)
        tree[node] = key
        while node > 1:
            key = min(key, tree[node ^ 1])
            node >>= 1
            tree[node] = key
        root = key
    return root, latest, total_prompt, total_response


@numba.njit(cache=True, nogil=True)
def _advance_two(samples, lo_a, lo_b, j0, j1, tree_a, tree_b, shape, a, b):
    """`_advance` of two groups at once, their updates interleaved."""
    prompt, response = samples
    leaves, bits = shape
    root_a, latest_a, prompt_a, response_a = a
    root_b, latest_b, prompt_b, response_b = b
    mask = leaves - 1
    for j in range(j0, j1):
        length_a = response[lo_a + j]
        length_b = response[lo_b + j]
        prompt_a += prompt[lo_a + j]
        prompt_b += prompt[lo_b + j]
        response_a += length_a
        response_b += length_b
        node_a = leaves + (root_a & mask)
        node_b = leaves + (root_b & mask)
        key_a = root_a + (length_a << bits)
        key_b = root_b + (length_b << bits)
        latest_a = max(latest_a, key_a)
        latest_b = max(latest_b, key_b)
        tree_a[node_a] = key_a
        tree_b[node_b] = key_b
        while node_a > 1:  # both trees have the same depth
            key_a = min(key_a, tree_a[node_a ^ 1])
            key_b = min(key_b, tree_b[node_b ^ 1])
            node_a >>= 1
            node_b >>= 1
            tree_a[node_a] = key_a
            tree_b[node_b] = key_b
        root_a = key_a
        root_b = key_b
    return (root_a, latest_a, prompt_a, response_a), (root_b, latest_b, prompt_b, response_b)


@numba.njit(cache=True, nogil=True)
def _read_out(chunks, h, end, done, state, bits, out):
    """The counts of the group's chunks that end after `done` samples; the next chunk."""
    sizes, order = chunks
    prompt_sum, makespan, response_sum = out
    while h < end and sizes[order[h]] == done:
        c = order[h]
        prompt_sum[c] = state[2]
        response_sum[c] = state[3]
        makespan[c] = state[1] >> bits
        h += 1
    return h


@numba.njit(cache=True, nogil=True)
def _finish(samples, lo, done, tree, shape, chunks, h, end, state, out):
    """The rest of one group's chunks, alone."""
    sizes, order = chunks
    while h < end:
        stop = sizes[order[h]]
        state = _advance(samples, lo, done, stop, tree, shape, state)
        done = stop
        h = _read_out(chunks, h, end, done, state, shape[1], out)


@numba.njit(cache=True, nogil=True)
def _by_length(lengths):
    """The indices of the positive `lengths`, shortest first: a counting sort (the lengths are
    chunk sizes, at most a step's samples), so that like lengths are neighbours."""
    tally = np.zeros(lengths.max() + 2 if len(lengths) else 1, dtype=np.int64)
    for n in lengths:
        tally[n + 1] += 1
    for n in range(1, len(tally)):
        tally[n] += tally[n - 1]
    zeros = tally[1]
    order = np.empty(len(lengths) - zeros, dtype=np.int64)
    for g in range(len(lengths)):
        n = lengths[g]
        if n > 0:
            order[tally[n] - zeros] = g
            tally[n] += 1
    return order


@numba.njit(cache=True, nogil=True)
def _by_heap(prompt, response, lo, concurrency, heap, chunks, h, end, out):
    """A group whose finish times do not fit tree keys: each chunk's sums in a loop and its
    makespan by a heap of its own (`heap_makespan`)."""
    sizes, order = chunks
    for i in range(h, end):
        c = order[i]
        total_prompt = 0
        total_response = 0
        longest = 0
        for j in range(lo, lo + sizes[c]):
            total_prompt += prompt[j]
            total_response += response[j]
            longest = max(longest, response[j])
        out[0][c] = total_prompt
        out[2][c] = total_response
        if sizes[c] > concurrency:
            longest = heap_makespan(response, lo, lo + sizes[c], concurrency, heap)
        out[1][c] = longest


@numba.njit(cache=True, nogil=True)
def grouped_counts(prompt, response, starts, sizes, order, concurrency):
    """Prompt sum, makespan and response sum of every chunk on `concurrency` slots, as
    `rollout_numba.counts` gives them; `order` lists the chunks by start, then size, ascending.
    """
    num_chunks = len(sizes)
    out = (
        np.zeros(num_chunks, dtype=np.int64),
        np.zeros(num_chunks, dtype=np.int64),
        np.zeros(num_chunks, dtype=np.int64),
    )
    samples = (prompt, response)
    chunks = (sizes, order)
    shape = tree_shape(concurrency)
    key_room = _KEY_LIMIT >> shape[1]
    # Every finish time stays below key_room (fits a key) where the samples times the longest
    # response does.
    longest = 0
    for j in range(len(response)):
        longest = max(longest, response[j])
    all_fit = longest < key_room // max(len(response), 1)
    first = np.empty(len(order) + 1, dtype=np.int64)
    num_groups = 0
    for i in range(len(order)):
        if i == 0 or starts[order[i]] != starts[order[i - 1]]:
            first[num_groups] = i
            num_groups += 1
    first[num_groups] = len(order)
    # No key reaches _KEY_LIMIT, so the leaves past the slots are never chosen: set once.
    tree_a = np.full(2 * shape[0], _KEY_LIMIT, dtype=np.int64)
    tree_b = np.full(2 * shape[0], _KEY_LIMIT, dtype=np.int64)
    heap = np.empty(concurrency, dtype=np.int64)
    queued = np.zeros(num_groups, dtype=np.int64)  # longest chunk the trees schedule, or 0
    for g in range(num_groups):
        lo, h, end = starts[order[first[g]]], first[g], first[g + 1]
        longest_chunk = sizes[order[end - 1]]
        if longest_chunk <= concurrency:
            _head(samples, lo, concurrency, tree_a, shape, chunks, h, end, out)
            continue
        fits = all_fit
        if not fits:
            total = 0
            for j in range(lo, lo + longest_chunk):
                total += response[j]
            fits = 0 <= total < key_room
        if fits:
            queued[g] = longest_chunk
        else:
            _by_heap(prompt, response, lo, concurrency, heap, chunks, h, end, out)
    by_length = _by_length(queued)
    for i in range(0, len(by_length), 2):
        ga = by_length[i]
        lo_a, end_a = starts[order[first[ga]]], first[ga + 1]
        h_a, a = _head(samples, lo_a, concurrency, tree_a, shape, chunks, first[ga], end_a, out)
        done = concurrency
        if i + 1 < len(by_length):
            gb = by_length[i + 1]
            lo_b, end_b = starts[order[first[gb]]], first[gb + 1]
            h_b, b = _head(samples, lo_b, concurrency, tree_b, shape, chunks, first[gb], end_b, out)
            while h_a < end_a and h_b < end_b:
                stop = min(sizes[order[h_a]], sizes[order[h_b]])
                a, b = _advance_two(samples, lo_a, lo_b, done, stop, tree_a, tree_b, shape, a, b)
                done = stop
                h_a = _read_out(chunks, h_a, end_a, done, a, shape[1], out)
                h_b = _read_out(chunks, h_b, end_b, done, b, shape[1], out)
            _finish(samples, lo_b, done, tree_b, shape, chunks, h_b, end_b, b, out)
        _finish(samples, lo_a, done, tree_a, shape, chunks, h_a, end_a, a, out)
    return out


@numba.njit(cache=True, nogil=True)
def unqueued_counts(prompt, response, cuts, starts, sizes):
    """Counts of chunks that never queue (makespan: the longest response), as
    `rollout_kernels._unqueued_counts` gives them: each run of samples from one of `cuts` (every
    chunk start, sorted, once) to the next reduced in one pass over the samples, then each
    chunk's counts from its runs."""
    runs = len(cuts)
    run_prompt = np.zeros(runs, dtype=np.int64)
    run_response = np.zeros(runs, dtype=np.int64)
    run_longest = np.zeros(runs, dtype=np.int64)
    for i in range(runs):
        lo, hi = cuts[i], cuts[i + 1] if i + 1 < runs else len(response)
        total_prompt = 0
        total_response = 0
        longest = 0
        for j in range(lo, hi):
            total_prompt += prompt[j]
            total_response += response[j]
            longest = max(longest, response[j])
        run_prompt[i], run_response[i], run_longest[i] = total_prompt, total_response, longest
    out = (
        np.zeros(len(sizes), dtype=np.int64),
        np.zeros(len(sizes), dtype=np.int64),
        np.zeros(len(sizes), dtype=np.int64),
    )
    i = 0
    for c in range(len(sizes)):
        # Each count's chunks tile the samples in order: a walk along the runs, from the first
        # run again where a chunk does not start at the end of the one before (the next count).
        if c > 0 and starts[c] != starts[c - 1] + sizes[c - 1]:
            i = 0
        while i < runs and cuts[i] < starts[c]:
            i += 1
        if sizes[c] == 0:
            continue
        end = starts[c] + sizes[c]
        total_prompt = 0
        total_response = 0
        longest = 0
        while i < runs and cuts[i] < end:
            total_prompt += run_prompt[i]
            total_response += run_response[i]
            longest = max(longest, run_longest[i])
            i += 1
        out[0][c], out[1][c], out[2][c] = total_prompt, longest, total_response
    return out
