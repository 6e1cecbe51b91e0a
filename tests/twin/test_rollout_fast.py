"""The fast rollout kernels agree exactly with the reference simulation (property tests)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaresize.traces.workload import Workload
from dynaresize.twin.costs import rollout_kernels
from dynaresize.twin.costs.rollout import RolloutCostParams, rollout_stage_s, rollout_stage_s_many
from dynaresize.twin.costs.rollout_kernels import KernelBackend, replica_counts

BACKENDS = [KernelBackend.NUMPY, KernelBackend.NUMBA]


@st.composite
def workloads(draw):
    num_steps = draw(st.integers(0, 6))
    prompts, responses = [], []
    for _ in range(num_steps):
        n = draw(st.integers(0, 40))
        max_len = draw(st.sampled_from([0, 1, 5, 100, 5000]))
        prompts.append(np.array(draw(st.lists(st.integers(0, 3000), min_size=n, max_size=n))))
        responses.append(np.array(draw(st.lists(st.integers(0, max_len), min_size=n, max_size=n))))
    return Workload.from_steps(prompts, responses)


@st.composite
def params(draw):
    capacity = draw(st.one_of(st.none(), st.integers(1, 20_000)))
    return RolloutCostParams(
        decode_base_s_per_iter=draw(st.floats(0, 0.1)),
        decode_s_per_active_seq=draw(st.floats(0, 0.01)),
        prefill_s_per_token=draw(st.floats(0, 1e-3)),
        kv_capacity_tokens_per_replica=capacity,
        kv_reserved_prompt_tokens_per_seq=draw(st.integers(0, 500)),
        kv_reserved_response_tokens_per_seq=draw(st.integers(1, 2000)),
        max_num_seqs_per_replica=draw(st.one_of(st.none(), st.integers(1, 50))),
    )


@settings(max_examples=150, deadline=None)
@given(workload=workloads(), p=params(), num_replicas=st.integers(1, 9))
def test_fast_backends_equal_reference_exactly(workload, p, num_replicas):
    reference = [
        rollout_stage_s(*workload.step(k), num_replicas=num_replicas, params=p)
        for k in range(workload.num_steps)
    ]
    for backend in BACKENDS:
        fast = rollout_stage_s_many(workload, num_replicas=num_replicas, params=p, backend=backend)
        assert fast.dtype == np.float64
        assert fast.tolist() == reference


@settings(max_examples=60, deadline=None)
@given(workload=workloads(), concurrency=st.one_of(st.none(), st.integers(1, 12)))
def test_backends_give_identical_counts(workload, concurrency):
    results = [
        replica_counts(
            workload.prompt_tokens,
            workload.response_tokens,
            workload.step_offsets,
            num_replicas=3,
            max_concurrent_seqs=concurrency,
            backend=backend,
        )
        for backend in BACKENDS
    ]
    for other in results[1:]:
        for field in ("prompt_tokens_total", "decode_iterations", "active_seq_iterations"):
            assert getattr(other, field).tolist() == getattr(results[0], field).tolist()


def test_env_var_selects_numpy_fallback(monkeypatch):
    monkeypatch.setenv(rollout_kernels.NO_NUMBA_ENV, "1")
    assert rollout_kernels.default_backend() is KernelBackend.NUMPY
    rng = np.random.default_rng(0)
    w = Workload.from_steps(
        [rng.integers(1, 100, 64) for _ in range(5)], [rng.integers(0, 4000, 64) for _ in range(5)]
    )
    p = RolloutCostParams()
    numpy_result = rollout_stage_s_many(w, num_replicas=4, params=p)
    monkeypatch.delenv(rollout_kernels.NO_NUMBA_ENV)
    assert rollout_stage_s_many(w, num_replicas=4, params=p).tolist() == numpy_result.tolist()


def test_numba_only_where_it_repays_its_load(monkeypatch):
    monkeypatch.delenv(rollout_kernels.NO_NUMBA_ENV, raising=False)
    monkeypatch.setattr(rollout_kernels, "_loaded_kernel", None)
    small = rollout_kernels.NUMBA_MIN_SAMPLES - 1
    assert rollout_kernels.default_backend(small) is KernelBackend.NUMPY
    assert rollout_kernels.default_backend(small + 1) is KernelBackend.NUMBA
    assert rollout_kernels.default_backend() is KernelBackend.NUMBA  # size unknown
    # once the kernel is loaded in the process, small calls use it too
    rollout_kernels._numba_kernel()
    assert rollout_kernels.default_backend(10) is KernelBackend.NUMBA
    monkeypatch.setenv(rollout_kernels.NO_NUMBA_ENV, "1")
    assert rollout_kernels.default_backend(small + 1) is KernelBackend.NUMPY


@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 10_000), min_size=1, max_size=300),
    concurrency=st.integers(1, 70),
)
def test_tournament_tree_and_heap_give_the_reference_makespan(lengths, concurrency):
    from dynaresize.twin.costs import rollout_numba
    from dynaresize.twin.costs.rollout import simulate_replica_slots

    response = np.array(lengths, dtype=np.int64)
    if len(response) <= concurrency:
        return
    leaves, bits = rollout_numba.tree_shape(concurrency)
    tree = np.empty(2 * leaves, dtype=np.int64)
    heap = np.empty(concurrency, dtype=np.int64)
    expected, _ = simulate_replica_slots(response, concurrency)
    n = len(response)
    assert rollout_numba.tree_makespan(response, 0, n, concurrency, tree, leaves, bits) == expected
    assert rollout_numba.heap_makespan(response, 0, n, concurrency, heap) == expected


def test_lengths_too_large_for_tree_keys_take_the_heap():
    """Lengths whose sum does not fit a tree key (finish time shifted by the index bits) are
    scheduled by the heap, and still give the reference makespan."""
    from dynaresize.twin.costs.rollout import simulate_replica_slots

    response = np.array([2**58, 3, 2**58, 5, 2**57, 7, 2**56], dtype=np.int64)
    counts = replica_counts(
        np.zeros(len(response), dtype=np.int64),
        response,
        np.array([0, len(response)]),
        num_replicas=1,
        max_concurrent_seqs=3,
        backend=KernelBackend.NUMBA,
    )
    assert counts.decode_iterations.tolist() == [simulate_replica_slots(response, 3)[0]]


@settings(max_examples=100, deadline=None)
@given(
    workload=workloads(),
    concurrency=st.one_of(st.none(), st.integers(1, 12)),
    counts=st.lists(st.integers(1, 9), min_size=1, max_size=5),
)
def test_counts_of_several_replica_counts_equal_one_call_each(workload, concurrency, counts):
    """Chunks of different replica counts that start at the same sample share one schedule;
    each count's counts equal those of its own call, on either backend."""
    from dynaresize.twin.costs.rollout_kernels import replica_counts_many

    args = (workload.prompt_tokens, workload.response_tokens, workload.step_offsets)
    many = replica_counts_many(
        *args,
        replica_counts_wanted=tuple(counts),
        max_concurrent_seqs=concurrency,
        backend=KernelBackend.NUMBA,
    )
    assert sorted(many) == sorted(set(counts))
    for r in counts:
        one = replica_counts(
            *args, num_replicas=r, max_concurrent_seqs=concurrency, backend=KernelBackend.NUMPY
        )
        for field in ("prompt_tokens_total", "decode_iterations", "active_seq_iterations"):
            assert getattr(many[r], field).tolist() == getattr(one, field).tolist()


def test_several_replica_counts_with_lengths_too_large_for_tree_keys():
    from dynaresize.twin.costs.rollout import simulate_replica_slots
    from dynaresize.twin.costs.rollout_kernels import replica_counts_many

    response = np.array([2**58, 3, 2**58, 5, 2**57, 7, 2**56, 1], dtype=np.int64)
    many = replica_counts_many(
        np.zeros(len(response), dtype=np.int64),
        response,
        np.array([0, len(response)]),
        replica_counts_wanted=(1, 2),
        max_concurrent_seqs=3,
        backend=KernelBackend.NUMBA,
    )
    assert many[1].decode_iterations.tolist() == [simulate_replica_slots(response, 3)[0]]
    halves = [
        simulate_replica_slots(response[:4], 3)[0],
        simulate_replica_slots(response[4:], 3)[0],
    ]
    assert many[2].decode_iterations.tolist() == halves


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("concurrency", [None, 200])
@pytest.mark.parametrize("sizes", [[117], [117, 0, 40, 1, 64]])
def test_counts_of_unqueued_chunks_equal_one_call_each(backend, concurrency, sizes):
    """Where no chunk waits for a slot, every replica count's counts come from one pass over
    the runs of samples between chunk starts; a count of one replica among others (on one step,
    its one chunk starts where the next count's first does), and empty steps, included."""
    from dynaresize.twin.costs.rollout_kernels import replica_counts_many

    rng = np.random.default_rng(3)
    w = Workload.from_steps(
        [rng.integers(0, 3000, n) for n in sizes], [rng.integers(0, 9000, n) for n in sizes]
    )
    args = (w.prompt_tokens, w.response_tokens, w.step_offsets)
    many = replica_counts_many(
        *args,
        replica_counts_wanted=(1, 5, 2, 7, 2),
        max_concurrent_seqs=concurrency,
        backend=backend,
    )
    for r in (1, 5, 2, 7):
        one = replica_counts(
            *args, num_replicas=r, max_concurrent_seqs=concurrency, backend=KernelBackend.NUMPY
        )
        for field in ("prompt_tokens_total", "decode_iterations", "active_seq_iterations"):
            assert getattr(many[r], field).tolist() == getattr(one, field).tolist()
