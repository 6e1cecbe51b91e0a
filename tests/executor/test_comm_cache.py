"""Communicator reuse: role maps are consistent for any candidate set, every rank creates groups in
one order, and after the background build a resize binds ready, working groups without creating any
(while the ablation builds them on the spot)."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaresize.executor.roles import RoleMap
from dynaresize.executor.worker.comm_cache import (
    CommunicatorCache,
    GroupKind,
    distinct_memberships,
    memberships,
)
from dynaresize.policies.types import Allocation
from dynaresize.traces.phases import Role


@settings(max_examples=100, deadline=None)
@given(
    num_workers=st.integers(min_value=2, max_value=16),
    data=st.data(),
)
def test_role_maps_partition_the_workers_and_memberships_are_deduplicated(
    num_workers, data
) -> None:
    trains = data.draw(
        st.lists(st.integers(1, num_workers - 1), min_size=1, max_size=num_workers, unique=True)
    )
    candidates = [Allocation(train_gpus=t, rollout_gpus=num_workers - t) for t in trains]
    role_maps = [RoleMap.for_allocation(a) for a in candidates]
    order = distinct_memberships(role_maps)
    assert len(order) == len(set(order))
    for roles in role_maps:
        assert sorted(roles.trainer_ids + roles.rollout_ids) == list(range(num_workers))
        assert len(roles.trainer_ids) == roles.allocation.train_gpus
        for worker in range(num_workers):
            if roles.role_of(worker) is Role.TRAIN:
                assert roles.trainer_ids[roles.trainer_rank(worker)] == worker
            else:
                assert worker in roles.rollout_ids
        for members in memberships(roles).values():
            assert members in order
        sync = memberships(roles)[GroupKind.WEIGHT_SYNC]
        assert set(roles.rollout_ids) <= set(sync) and roles.trainer_ids[0] in sync
    # The order is a pure function of the set of role maps: any rank computes the same one.
    assert order == distinct_memberships(list(reversed(role_maps)))


def test_a_candidate_of_another_world_size_is_refused() -> None:
    with pytest.raises(ValueError, match="does not use 4 workers"):
        CommunicatorCache(rank=0, world_size=4, candidates=[Allocation.parse("2:1")])


CANDIDATES = ["3:1", "2:2", "1:3"]
WORLD = 4


def _worker(rank: int, init_file: str, queue) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    candidates = [Allocation.parse(c) for c in CANDIDATES]
    report: dict = {"rank": rank}
    try:
        cache = CommunicatorCache(rank=rank, world_size=WORLD, candidates=candidates)
        cache.start_prewarm()
        # Training steps go on meanwhile, on the world group, from the main thread.
        for step in range(20):
            value = torch.tensor([float(rank + step)])
            dist.all_reduce(value)
            assert value.item() == sum(range(WORLD)) + WORLD * step
        assert cache.wait_prewarmed(60)
        report["reuse"] = [_exercise(cache, a, rank) for a in candidates]
        report["background"] = cache.groups_built_in_background
        dist.barrier()
        ablation = CommunicatorCache(
            rank=rank, world_size=WORLD, candidates=candidates, reuse=False
        )
        report["ablation"] = [_exercise(ablation, a, rank) for a in candidates]
        groups_before = len(dist.distributed_c10d._world.pg_map)
        report["closed"] = cache.close(timeout_s=30) + ablation.close(timeout_s=30)
        report["groups_destroyed"] = groups_before - len(dist.distributed_c10d._world.pg_map)
    except Exception as exc:  # reported to the test
        report["error"] = repr(exc)
    queue.put(report)
    dist.destroy_process_group()


def _exercise(cache: CommunicatorCache, allocation: Allocation, rank: int) -> dict:
    bound = cache.bind(allocation)
    roles = bound.roles
    dp_group = bound.group(GroupKind.TRAIN_DP)
    result = {
        "built_on_bind": bound.built_on_bind,
        "cache_hits": bound.cache_hits,
        "dp_sum": None,
        "synced": None,
    }
    if rank in roles.trainer_ids:
        assert dp_group is not None
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value, group=dp_group)
        result["dp_sum"] = value.item()
    else:
        assert dp_group is None
    sync_group = bound.group(GroupKind.WEIGHT_SYNC)
    if sync_group is not None:
        weights = torch.full((4,), 7.5) if rank == roles.trainer_ids[0] else torch.zeros(4)
        dist.broadcast(weights, src=roles.trainer_ids[0], group=sync_group)
        result["synced"] = bool(torch.all(weights == 7.5))
    return result


def test_bound_groups_are_prebuilt_and_work_on_four_ranks(tmp_path) -> None:
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(r, str(tmp_path / "init"), queue)) for r in range(WORLD)
    ]
    for p in procs:
        p.start()
    reports = sorted((queue.get(timeout=120) for _ in procs), key=lambda r: r["rank"])
    for p in procs:
        p.join(timeout=30)
    for report in reports:
        assert "error" not in report, report
    candidates = [Allocation.parse(c) for c in CANDIDATES]
    num_distinct = len(distinct_memberships([RoleMap.for_allocation(a) for a in candidates]))
    for report in reports:
        rank = report["rank"]
        assert report["background"] == num_distinct
        # shutdown destroys what the caches built that this rank is in: every prewarmed group,
        # and the groups the ablation built for the last split it bound
        order = distinct_memberships([RoleMap.for_allocation(a) for a in candidates])
        last = memberships(RoleMap.for_allocation(candidates[-1])).values()
        expected = sum(rank in m for m in order) + sum(rank in m for m in last)
        assert report["closed"] == expected > 0
        assert report["groups_destroyed"] == expected
        for mode in ("reuse", "ablation"):
            for allocation, result in zip(candidates, report[mode], strict=True):
                roles = RoleMap.for_allocation(allocation)
                groups = memberships(roles)
                expected_built = 0 if mode == "reuse" else len(groups)
                assert result["built_on_bind"] == expected_built
                assert result["cache_hits"] == len(groups) - expected_built
                if rank in roles.trainer_ids:
                    assert result["dp_sum"] == sum(r + 1 for r in roles.trainer_ids)
                in_sync = rank in groups[GroupKind.WEIGHT_SYNC]
                assert result["synced"] is (True if in_sync else None)
