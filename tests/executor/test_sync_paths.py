"""Each replica's weight-sync path, decided once: every replica gets exactly one path, a replica
that cannot map the trainer's buffer never sends the others to the network, and a failure is
tried again only for another buffer. The device half needs CUDA IPC
(tests/executor/test_device_weight_paths_gpu.py); the decision is checked here on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynaresize.executor.worker.sync_paths import (
    MapOutcome,
    ReplicaPaths,
    SyncPath,
    SyncPlan,
    count_paths,
    path_note,
)

# a source and its replicas, each replica's mapping outcome (True: it mapped the buffer)
members = st.lists(st.integers(0, 63), min_size=2, max_size=12, unique=True).flatmap(
    lambda ids: st.tuples(
        st.just(ids[0]),
        st.dictionaries(st.sampled_from(ids[1:]), st.booleans(), min_size=len(ids) - 1),
    )
)


def _decided(mapped: dict[int, bool]) -> dict[int, MapOutcome]:
    """Each replica decides on its own, as in its own process."""
    outcomes = {}
    for worker, ok in mapped.items():
        paths = ReplicaPaths()
        outcomes[worker] = paths.decide("buffer", lambda ok=ok: None if ok else "not visible")
    return outcomes


@given(members)
def test_every_replica_takes_exactly_the_path_its_own_mapping_gave(case) -> None:
    source, mapped = case
    outcomes = _decided(mapped)
    gathered = [(source, None), *((w, o.path) for w, o in outcomes.items())]
    plan = SyncPlan.of(source, reversed(gathered))  # the order of the gather does not matter
    device = plan.replicas_on(SyncPath.DEVICE)
    network = plan.replicas_on(SyncPath.NETWORK)
    assert set(device) | set(network) == set(mapped) and not set(device) & set(network)
    assert source not in device + network
    # a failed replica never blocks the others: the device path is exactly those that mapped
    assert set(device) == {w for w, ok in mapped.items() if ok}
    assert plan.counts() == {"cuda_ipc": len(device), "network": len(network)}
    assert plan.all_network == (not device)
    assert all(outcomes[w].reason for w in network) and not any(outcomes[w].reason for w in device)


@given(members, st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=30))
def test_a_replica_maps_each_buffer_once_and_keeps_the_outcome(case, buffers) -> None:
    """Many syncs over a few buffers (another first trainer after a resize publishes another):
    one mapping attempt per buffer seen, the first outcome kept, a failure not tried again."""
    _, mapped = case
    for ok in mapped.values():
        paths = ReplicaPaths()
        tries: list[str] = []

        def try_map(key: str, ok: bool = ok, tries: list[str] = tries) -> str | None:
            tries.append(key)
            return None if ok else f"{key} refused"

        seen = [paths.decide(key, lambda key=key: try_map(key)) for key in buffers]
        assert tries == list(dict.fromkeys(buffers))
        assert paths.attempts == len(tries)
        expected = SyncPath.DEVICE if ok else SyncPath.NETWORK
        assert {outcome.path for outcome in seen} == {expected}


def test_an_outcome_can_differ_per_buffer_and_is_kept_per_buffer() -> None:
    paths = ReplicaPaths()
    assert paths.decide("near", lambda: None).path is SyncPath.DEVICE
    refused = paths.decide("far", lambda: "device buffer of node b opened on a")
    assert refused == MapOutcome(SyncPath.NETWORK, "device buffer of node b opened on a")
    assert paths.decide("far", lambda: None) == refused  # not tried again
    assert paths.decide("near", lambda: "boom").path is SyncPath.DEVICE
    assert paths.decide("blank", lambda: "").reason  # a failure always says why
    assert paths.attempts == 3


def test_a_plan_refuses_answers_that_do_not_fit_one_sync() -> None:
    with pytest.raises(ValueError, match="worker 2 answered twice"):
        SyncPlan.of(0, [(0, None), (2, SyncPath.DEVICE), (2, SyncPath.NETWORK)])
    with pytest.raises(ValueError, match=r"source 0 .* took a path"):
        SyncPlan.of(0, [(0, SyncPath.DEVICE), (1, SyncPath.NETWORK)])
    with pytest.raises(ValueError, match=r"replica 1 .* has no path"):
        SyncPlan.of(0, [(0, None), (1, None)])
    with pytest.raises(ValueError, match="source 0 is not among"):
        SyncPlan.of(0, [(1, SyncPath.NETWORK)])


def test_the_driver_counts_the_replicas_of_each_path_from_their_results() -> None:
    results = {
        0: {"source": True, "digest": "d"},
        3: {"source": False, "path": "cuda_ipc"},
        1: {"source": False, "path": "network"},
        2: {"source": False, "path": "cuda_ipc"},
    }
    assert count_paths(results) == {"cuda_ipc": 2, "network": 1}
    assert count_paths({0: {"source": True}}) == {"cuda_ipc": 0, "network": 0}
    note = path_note({"cuda_ipc": 2, "network": 1})
    assert "2 replica(s) load from the first trainer's device buffer" in note
    assert "1 receive a host vector" in note


def _network_member(rank: int, world: int, store: str, paths: dict, out: str) -> None:
    """One member of a sync group over gloo on CPU, taking the network half of `paths`."""
    import torch
    import torch.distributed as dist

    from dynaresize.executor.worker.device_weights import over_network
    from tests.executor.device_sync_member import join_group

    join_group(rank, world, store)
    try:
        params = [torch.full((5, 3), float(rank)), torch.arange(4.0) * (rank + 1)]
        plan = SyncPlan(source=0, paths=paths)
        flat = over_network(params, worker_id=rank, source=0, plan=plan, group=dist.group.WORLD)
        torch.save(flat, Path(out) / f"{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_in_a_mixed_sync_only_the_network_replicas_receive_the_host_vector(tmp_path) -> None:
    """The network half of a sync where replica 1 is on the device path: the trainer sends its
    exact weights to replicas 2 and 3 alone, and replica 1 takes no part (its own load comes
    from the trainer's device buffer, on CUDA)."""
    import torch
    import torch.multiprocessing as mp

    paths = {1: SyncPath.DEVICE, 2: SyncPath.NETWORK, 3: SyncPath.NETWORK}
    mp.spawn(
        _network_member,
        args=(4, str(tmp_path / "store"), paths, str(tmp_path)),
        nprocs=4,
        join=True,
    )
    got = {rank: torch.load(tmp_path / f"{rank}.pt") for rank in range(4)}
    sent = torch.cat([torch.zeros(15), torch.arange(4.0)])
    assert torch.equal(got[0], sent)
    assert got[1] is None
    assert torch.equal(got[2], sent) and torch.equal(got[3], sent)
