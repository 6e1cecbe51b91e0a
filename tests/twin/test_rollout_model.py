"""The rollout cost model against closed forms and hand-worked schedules."""

from __future__ import annotations

import numpy as np
import pytest

from dynaresize.traces.workload import Workload
from dynaresize.twin.costs.rollout import (
    RolloutCostParams,
    replica_chunk_sizes,
    rollout_stage_s,
    rollout_stage_s_many,
    simulate_replica_slots,
)

UNLIMITED = RolloutCostParams(kv_capacity_tokens_per_replica=None)


def limited(concurrency: int) -> RolloutCostParams:
    """Params whose KV capacity admits exactly `concurrency` sequences."""
    return RolloutCostParams(
        kv_capacity_tokens_per_replica=concurrency * 100,
        kv_reserved_prompt_tokens_per_seq=20,
        kv_reserved_response_tokens_per_seq=80,
    )


def test_unlimited_single_replica_matches_closed_form():
    rng = np.random.default_rng(1)
    prompt = rng.integers(1, 2000, 300)
    response = rng.integers(0, 9000, 300)
    p = UNLIMITED
    expected = (
        p.prefill_s_per_token * prompt.sum()
        + p.decode_base_s_per_iter * response.max()
        + p.decode_s_per_active_seq * response.sum()
    )
    assert rollout_stage_s(prompt, response, num_replicas=1, params=p) == pytest.approx(
        expected, rel=1e-12
    )


def test_unlimited_stage_is_slowest_replica_closed_form():
    prompt = np.array([10, 10, 10, 10, 10])
    response = np.array([100, 1, 1, 50, 60])
    p = UNLIMITED
    # array_split over 2 replicas: [100, 1, 1] and [50, 60]
    first = (
        p.prefill_s_per_token * 30
        + p.decode_base_s_per_iter * 100
        + p.decode_s_per_active_seq * 102
    )
    second = (
        p.prefill_s_per_token * 20 + p.decode_base_s_per_iter * 60 + p.decode_s_per_active_seq * 110
    )
    got = rollout_stage_s(prompt, response, num_replicas=2, params=p)
    assert got == pytest.approx(max(first, second), rel=1e-12)


def test_hand_worked_fifo_schedule():
    # Two slots, lengths 5, 3, 4, 1, 2 in FIFO order:
    # t=0 admit 5 and 3; t=3 the 3 ends, admit 4; t=5 the 5 ends, admit 1; t=6 admit 2;
    # t=7 the 4 ends; t=8 the 2 ends. Two active for 7 iterations, one for the last: 15 = sum(L).
    iterations, active = simulate_replica_slots(np.array([5, 3, 4, 1, 2]), 2)
    assert iterations == 8
    assert active == 15


def test_one_slot_runs_samples_back_to_back():
    response = np.array([7, 0, 3, 9])
    iterations, active = simulate_replica_slots(response, 1)
    assert iterations == response.sum() == active


def test_active_sequence_iterations_equal_total_response_tokens():
    rng = np.random.default_rng(3)
    for concurrency in (1, 2, 5, None):
        response = rng.integers(0, 50, 40)
        _, active = simulate_replica_slots(response, concurrency)
        assert active == response.sum()


def test_concurrency_from_kv_capacity():
    p = RolloutCostParams(
        kv_capacity_tokens_per_replica=450_000,
        kv_reserved_prompt_tokens_per_seq=1024,
        kv_reserved_response_tokens_per_seq=8192,
    )
    assert p.kv_reserved_tokens_per_seq == 9216
    assert p.max_concurrent_seqs == 450_000 // 9216
    assert p.model_copy(update={"max_num_seqs_per_replica": 16}).max_concurrent_seqs == 16
    assert UNLIMITED.max_concurrent_seqs is None
    tiny = p.model_copy(update={"kv_capacity_tokens_per_replica": 10})
    assert tiny.max_concurrent_seqs == 1


def test_iterations_within_list_scheduling_bounds():
    # Any FIFO list schedule on C slots: max(max L, sum L / C) <= T <= sum L / C + max L (Graham).
    rng = np.random.default_rng(5)
    for concurrency in (1, 2, 3, 7, 16):
        response = rng.integers(0, 3000, 120)
        iterations, _ = simulate_replica_slots(response, concurrency)
        assert iterations >= max(response.max(), response.sum() / concurrency)
        assert iterations <= response.sum() / concurrency + response.max()
    unlimited_iterations, _ = simulate_replica_slots(response, None)
    assert unlimited_iterations == response.max()


def test_edge_cases_empty_step_zero_lengths_and_more_replicas_than_samples():
    empty = np.zeros(0, dtype=np.int64)
    assert rollout_stage_s(empty, empty, num_replicas=4, params=UNLIMITED) == 0.0
    p = UNLIMITED
    zero = rollout_stage_s(np.array([100]), np.array([0]), num_replicas=1, params=p)
    assert zero == pytest.approx(100 * p.prefill_s_per_token)
    few = rollout_stage_s(np.array([1, 1]), np.array([10, 20]), num_replicas=5, params=p)
    alone = rollout_stage_s(np.array([1]), np.array([20]), num_replicas=1, params=p)
    assert few == alone
    with pytest.raises(ValueError):
        rollout_stage_s(np.array([1]), np.array([1]), num_replicas=0, params=p)


def test_chunk_sizes_follow_array_split():
    for n in range(0, 20):
        for r in range(1, 6):
            expected = [len(c) for c in np.array_split(np.arange(n), r)]
            assert replica_chunk_sizes(n, r).tolist() == expected


def test_many_handles_empty_steps_and_no_steps():
    w = Workload.from_steps(
        [np.array([5, 5]), np.zeros(0, np.int64), np.array([3])],
        [np.array([10, 30]), np.zeros(0, np.int64), np.array([0])],
    )
    got = rollout_stage_s_many(w, num_replicas=2, params=limited(1))
    expected = [rollout_stage_s(*w.step(k), num_replicas=2, params=limited(1)) for k in range(3)]
    assert got.tolist() == expected
    assert got[1] == 0.0
    none = Workload.from_steps([], [])
    assert rollout_stage_s_many(none, num_replicas=3, params=UNLIMITED).shape == (0,)


def test_params_reject_negative_and_nan():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        RolloutCostParams(decode_base_s_per_iter=-1.0)
    with pytest.raises(ValidationError):
        RolloutCostParams(prefill_s_per_token=float("nan"))
    with pytest.raises(ValidationError):
        RolloutCostParams(kv_capacity_tokens_per_replica=0)
