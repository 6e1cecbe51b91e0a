"""Resize strategies: the re-cut plan covers every slice once, resize costs come from step times
alone, and on real Ray workers every strategy (each overlapped mechanism alone, all, none, and
stop-and-rebuild) moves trainer state to a new split and back bit for bit."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaresize.executor.observe.measure import resize_costs
from dynaresize.executor.roles import RoleMap
from dynaresize.executor.worker.shards import ShardLayout
from dynaresize.executor.worker.slice_moves import reshard_moves
from dynaresize.policies.types import Allocation
from dynaresize.traces.phases import PhaseName


@given(
    num_workers=st.integers(min_value=2, max_value=9),
    data=st.data(),
)
def test_future_replicas_are_the_trainers_some_candidate_makes_replicas(
    num_workers: int, data
) -> None:
    split = lambda t: Allocation(train_gpus=t, rollout_gpus=num_workers - t)  # noqa: E731
    start = RoleMap.for_allocation(split(data.draw(st.integers(1, num_workers - 1))))
    counts = data.draw(st.lists(st.integers(1, num_workers - 1), max_size=4, unique=True))
    candidates = tuple(split(t) for t in counts)
    expected = {
        w
        for c in candidates
        for w in RoleMap.for_allocation(c).rollout_ids
        if w in start.trainer_ids
    }
    assert set(start.future_replicas(candidates)) == expected


@settings(max_examples=150, deadline=None)
@given(
    numel=st.integers(min_value=1, max_value=10_000),
    num_workers=st.integers(min_value=2, max_value=9),
    data=st.data(),
)
def test_reshard_moves_cover_every_new_slice_once(numel: int, num_workers: int, data) -> None:
    old_t = data.draw(st.integers(1, num_workers - 1))
    new_t = data.draw(st.integers(1, num_workers - 1))
    old = RoleMap.for_allocation(Allocation(train_gpus=old_t, rollout_gpus=num_workers - old_t))
    new = RoleMap.for_allocation(Allocation(train_gpus=new_t, rollout_gpus=num_workers - new_t))
    moves = reshard_moves(old, new, numel=numel)
    old_layout = ShardLayout(numel=numel, num_ranks=old_t)
    new_layout = ShardLayout(numel=numel, num_ranks=new_t)
    assert sum(m.numel for m in moves) == numel
    for rank, worker in enumerate(new.trainer_ids):
        mine = [m for m in moves if m.dst_worker == worker]
        offset = 0
        for move in mine:
            assert move.dst_start == offset and move.numel > 0
            src_rank = old.trainer_rank(move.src_worker)
            assert move.src_start + move.numel <= old_layout.shard_numel(src_rank)
            # Global positions agree on both sides.
            assert old_layout.bounds(src_rank)[0] + move.src_start == (
                new_layout.bounds(rank)[0] + move.dst_start
            )
            offset += move.numel
        assert offset == new_layout.shard_numel(rank)


@dataclass(frozen=True)
class _Step:
    start_s: float
    end_s: float
    resize_id: int | None = None


def test_resize_cost_is_the_gap_and_the_first_step_slowdown() -> None:
    steps = [
        _Step(0.0, 1.0),
        _Step(1.0, 2.0),
        _Step(2.75, 4.25, resize_id=0),  # waited 0.75 s, then ran 1.5 s
        _Step(4.25, 5.25),
        _Step(5.5, 6.5, resize_id=1),  # no step after it
    ]
    costs = resize_costs(steps)
    assert [c.resize_id for c in costs] == [0, 1]
    assert costs[0].critical_s == pytest.approx(0.75)
    assert costs[0].background_s == pytest.approx(0.5)
    assert costs[1].critical_s == pytest.approx(0.25)
    assert costs[1].background_s is None
    # Only step times enter: the same steps in any order give the same costs.
    assert resize_costs(list(reversed(steps))) == costs


# ---------------------------------------------------------------------------------------------
# Real workers on CPU.

ray = pytest.importorskip("ray")

from dynaresize.executor.worker.actor import LiveWorker  # noqa: E402


@pytest.fixture(scope="module")
def live_config():
    from dynaresize.executor.config import LiveConfig, StagingSettings

    return LiveConfig(
        num_workers=3,
        initial_allocation="2:1",
        candidate_allocations="2:1,1:2",
        staging=StagingSettings(chunk_mib=1, num_buffers=2),
        checkpoint_every_steps=None,
    )


@pytest.fixture(scope="module")
def runtime(live_config, _ray_started):
    from ray.util.placement_group import remove_placement_group

    from dynaresize.executor.testing.harness import start_runtime

    rt, group, started = start_runtime(live_config)
    yield rt
    for actor in rt.workers:
        ray.kill(actor, no_restart=True)
    remove_placement_group(group)
    if started:
        ray.shutdown()


def _load_random_state(rt, numel: int, *, optimizer_step: int) -> dict[str, torch.Tensor]:
    from dynaresize.executor.worker.shards import shards_from_full

    gen = torch.Generator().manual_seed(optimizer_step)
    vectors = {
        "master": torch.randn(numel, generator=gen),
        "exp_avg": torch.randn(numel, generator=gen),
        "exp_avg_sq": torch.rand(numel, generator=gen),
    }
    roles = rt.roles
    layout = ShardLayout(numel=numel, num_ranks=roles.num_trainers)
    shards = shards_from_full(vectors, layout, optimizer_step=optimizer_step)
    rt.call_each(
        rt.call([w], LiveWorker.load_shard, shards[roles.trainer_rank(w)])
        for w in roles.trainer_ids
    ).wait("loading state")
    rt.weights_version = optimizer_step
    return vectors


def _current_vectors(rt) -> dict[str, torch.Tensor]:
    from dynaresize.executor.worker.shards import full_vectors

    shards = rt.call(rt.roles.trainer_ids, LiveWorker.export_shard).wait("exporting")
    return full_vectors(list(shards.values()))


def _round_trip(rt, strategy, *, optimizer_step: int) -> list:
    numel = rt.call([0], LiveWorker.trainer_numel).wait("sizing")[0]
    before = _load_random_state(rt, numel, optimizer_step=optimizer_step)
    start, other = rt.roles, RoleMap.for_allocation(Allocation.parse("1:2"))
    phases = []
    for target in (other, start):
        phases += strategy.resize(rt, target=target)
        strategy.after_step(rt)
        phases += strategy.pop_background_phases()
        assert rt.roles == target
    after = _current_vectors(rt)
    for key, value in before.items():
        assert torch.equal(after[key], value), key
    return phases


MECHANISMS = [
    {},
    {"reuse_communicators": False, "staging": False, "defer_optimizer": False},
    {"reuse_communicators": True, "staging": False, "defer_optimizer": False},
    {"reuse_communicators": False, "staging": True, "defer_optimizer": False},
    {"reuse_communicators": False, "staging": False, "defer_optimizer": True},
]


@pytest.mark.live
def test_overlapped_moves_state_there_and_back_bitwise_with_any_mechanisms(runtime) -> None:
    from dynaresize.executor.config import OverlappedMechanisms
    from dynaresize.executor.strategies.overlapped import OVERLAPPED, OverlappedStrategy

    for index, switches in enumerate(MECHANISMS):
        mechanisms = OverlappedMechanisms(**switches)
        strategy = OverlappedStrategy(mechanisms)
        phases = _round_trip(runtime, strategy, optimizer_step=3 + index)
        names = {p.phase for p in phases}
        assert {PhaseName.COMM_PREWARM, PhaseName.WEIGHT_RESTORE} <= names
        background = [p for p in phases if not p.critical]
        if mechanisms.defer_optimizer:
            assert [p.phase for p in background] == [PhaseName.OPTIMIZER_RESTORE] * 2
            assert all(p.end_s >= p.start_s for p in background)
        else:
            assert background == []
        if mechanisms.staging:
            export = [p for p in phases if p.phase is PhaseName.STATE_EXPORT]
            assert all(p.bytes_moved == 0 for p in export)  # held in place, never copied
        assert names <= set(OVERLAPPED.phases)
        strategy.release(runtime)


@pytest.mark.live
def test_stop_and_rebuild_restarts_the_workers_and_keeps_the_state(runtime) -> None:
    from dynaresize.executor.strategies.stop_and_rebuild import (
        STOP_AND_REBUILD,
        StopAndRebuildStrategy,
    )

    numel = runtime.call([0], LiveWorker.trainer_numel).wait("sizing")[0]
    before = _load_random_state(runtime, numel, optimizer_step=9)
    old_pids = {
        i["pid"] for i in runtime.call(runtime.all_ids, LiveWorker.info).wait("pids").values()
    }
    strategy = StopAndRebuildStrategy()
    phases = strategy.resize(runtime, target=RoleMap.for_allocation(Allocation.parse("1:2")))
    new_pids = {
        i["pid"] for i in runtime.call(runtime.all_ids, LiveWorker.info).wait("pids").values()
    }
    assert not old_pids & new_pids
    assert all(p.critical for p in phases)
    assert next(p.phase for p in phases) is PhaseName.STATE_EXPORT
    assert [p.phase for p in phases] == list(STOP_AND_REBUILD.phases)
    after = _current_vectors(runtime)
    for key, value in before.items():
        assert torch.equal(after[key], value), key


@pytest.mark.live
def test_host_sync_moves_state_there_and_back_bitwise_and_records_its_phases(runtime) -> None:
    from dynaresize.executor.strategies.host_sync import HOST_SYNC, HostSyncStrategy

    phases = _round_trip(runtime, HostSyncStrategy(), optimizer_step=11)
    assert all(p.critical for p in phases)
    one_resize = [p.phase for p in phases[: len(phases) // 2]]
    assert one_resize == list(HOST_SYNC.phases)


def test_every_strategy_is_one_registry_entry_with_both_halves() -> None:
    """The registry names every strategy once; each names its driver half, its worker half (the
    actor class has its methods), the setup parts of its prior and its phases; the twin prices
    every name."""
    from dynaresize.executor.cluster.worker_setup import SetupPart
    from dynaresize.executor.strategies.catalog import (
        STRATEGIES,
        build_strategy,
        live_worker_class,
    )
    from dynaresize.executor.testing.harness import BenchWorker
    from dynaresize.traces.phases import StrategyName
    from dynaresize.twin.costs.resize import ResizeCostParams
    from dynaresize.twin.costs.resize_strategies import STRATEGY_COSTS

    assert set(STRATEGIES) == set(StrategyName) == set(STRATEGY_COSTS)
    actor = live_worker_class()
    bench = live_worker_class(BenchWorker)
    assert actor.__name__ == "LiveWorker" and issubclass(actor, LiveWorker)
    assert issubclass(bench, BenchWorker) and hasattr(bench, "bench_step")
    for name, strategy in STRATEGIES.items():
        assert strategy.name is name and build_strategy(name).name is name
        for cls in (actor, bench):
            assert issubclass(cls, strategy.worker), (name, cls)
        public = [m for m in vars(strategy.worker) if not m.startswith("_")]
        assert public and all(callable(getattr(actor, m)) for m in public)
        assert strategy.phases and len(set(strategy.phases)) == len(strategy.phases)
        assert strategy.setup_parts and all(isinstance(p, SetupPart) for p in strategy.setup_parts)
        assert STRATEGY_COSTS[name].table in ResizeCostParams.model_fields
    assert len(actor.__mro__) == len(set(actor.__mro__))


@settings(max_examples=100, deadline=None)
@given(
    numel=st.integers(min_value=1_000, max_value=100_000),
    num_workers=st.integers(min_value=2, max_value=9),
    data=st.data(),
)
def test_the_twin_recut_share_is_what_the_executor_moves(numel, num_workers, data) -> None:
    """The twin's changed-owner share of a re-cut is the share of elements the executor's
    re-cut plan sends between workers, up to slice rounding: slices are ceil(numel / n) elements
    (the last one shorter), so inner boundary i lies less than i elements past its exact place,
    and each boundary's offset changes the crossing count by at most that much."""
    from dynaresize.twin.costs.resize import changed_owner_fraction

    old_t = data.draw(st.integers(1, num_workers - 1))
    new_t = data.draw(st.integers(1, num_workers - 1))
    old = RoleMap.for_allocation(Allocation(train_gpus=old_t, rollout_gpus=num_workers - old_t))
    new = RoleMap.for_allocation(Allocation(train_gpus=new_t, rollout_gpus=num_workers - new_t))
    crossing = sum(m.numel for m in reshard_moves(old, new, numel=numel) if not m.local)
    rounding_elements = sum(parts * (parts - 1) / 2 for parts in (old_t, new_t))
    assert crossing / numel == pytest.approx(
        changed_owner_fraction(old_t, new_t), abs=rounding_elements / numel
    )
