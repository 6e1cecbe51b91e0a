"""Placement over nodes, without a cluster: the config's node slots and split rule, the checks
made before any worker starts (given the nodes a cluster reports), the bundle order that gives
a node's workers consecutive ids, and the node notes of the records."""

from __future__ import annotations

import re
import socket
import time

import pytest
from pydantic import ValidationError

from dynaresize.executor.cluster import placement
from dynaresize.executor.cluster.placement import PlacementError
from dynaresize.executor.cluster.ray_cluster import bundle_for
from dynaresize.executor.config import LiveConfig
from dynaresize.policies.types import Allocation

TWO_BY_TWO = [{"resource": "node_a", "num_workers": 2}, {"resource": "node_b", "num_workers": 2}]


def config(**fields) -> LiveConfig:
    return LiveConfig.model_validate({"num_workers": 4, **fields})


def node(resources: dict[str, float], alive: bool = True) -> dict:
    return {"Alive": alive, "Resources": resources}


# --- the config ---------------------------------------------------------------------------


def test_whole_node_splits_keep_the_candidates_to_node_boundaries() -> None:
    live = config(placement={"nodes": TWO_BY_TWO, "splits": "whole_nodes"})
    assert live.candidates == (Allocation.parse("2:2"),)
    three_nodes = [
        {"resource": "a", "num_workers": 2},
        {"resource": "b", "num_workers": 2},
        {"resource": "c", "num_workers": 2},
    ]
    six = LiveConfig.model_validate(
        {
            "num_workers": 6,
            "initial_allocation": "4:2",
            "placement": {"nodes": three_nodes, "splits": "whole_nodes"},
        }
    )
    assert six.candidates == (Allocation.parse("4:2"), Allocation.parse("2:4"))


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {
                "initial_allocation": "3:1",
                "placement": {"nodes": TWO_BY_TWO, "splits": "whole_nodes"},
            },
            "initial_allocation: 3:1 cannot be placed on whole nodes of 2+2 workers",
        ),
        (
            {
                "candidate_allocations": ["3:1", "2:2"],
                "placement": {"nodes": TWO_BY_TWO, "splits": "whole_nodes"},
            },
            "candidate_allocations: 3:1 cannot be placed",
        ),
        (
            {"placement": {"nodes": [{"resource": "a", "num_workers": 3}, TWO_BY_TWO[1]]}},
            "placement.nodes: the slots hold 5 workers, num_workers is 4",
        ),
        ({"placement": {"splits": "whole_nodes"}}, "whole_nodes needs placement.nodes"),
        (
            {"placement": {"nodes": [TWO_BY_TWO[0], TWO_BY_TWO[0]]}},
            "resource 'node_a' names more than one slot",
        ),
        ({"staging": {"path": "device"}}, "staging.path: device needs device: cuda"),
        (
            {"device": "cuda", "num_gpus": 2, "staging": {"path": "device"}},
            "staging.path: device needs a GPU per worker (4 workers, num_gpus is 2)",
        ),
    ],
)
def test_a_placement_the_nodes_cannot_give_is_refused_naming_the_field(fields, message) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        config(**fields)


def test_device_transfers_need_a_gpu_each_and_a_path_that_allows_them() -> None:
    assert not config().device_transfers
    assert config(device="cuda", num_gpus=4).device_transfers
    assert not config(device="cuda", num_gpus=1).device_transfers  # workers share one GPU
    assert not config(device="cuda", num_gpus=4, staging={"path": "host"}).device_transfers


# --- before anything starts ---------------------------------------------------------------


def test_an_address_that_does_not_answer_fails_at_once() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again below: nobody listens there
    started = time.monotonic()
    with pytest.raises(PlacementError, match=f"--address 127.0.0.1:{port}: no Ray cluster"):
        placement.check_address(f"127.0.0.1:{port}")
    assert time.monotonic() - started < placement.ADDRESS_TIMEOUT_S + 1
    with pytest.raises(PlacementError, match="not of the form HOST:PORT"):
        placement.check_address("head-node")


def test_an_address_that_answers_passes() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        host, port = server.getsockname()
        placement.check_address(f"{host}:{port}")
        placement.check_address(f"ray://{host}:{port}")
    placement.check_address(None)
    placement.check_address("auto")


def test_pinned_workers_carry_their_nodes_resource() -> None:
    live = config(placement={"nodes": TWO_BY_TWO})
    bundles = placement.worker_bundles(live, base={"CPU": 1.0})
    assert bundles == [{"CPU": 1.0, "node_a": 1.0}] * 2 + [{"CPU": 1.0, "node_b": 1.0}] * 2
    assert placement.worker_bundles(config(), base={"CPU": 1.0}) == [{"CPU": 1.0}] * 4


def _check(monkeypatch, live: LiveConfig, nodes: list[dict]) -> None:
    monkeypatch.setattr(placement.ray, "nodes", lambda: nodes)
    placement.check_capacity(live, placement.worker_bundles(live, base=bundle_for(live)))


def test_capacity_is_checked_against_what_the_cluster_has(monkeypatch) -> None:
    two_nodes = [node({"CPU": 2, "node_a": 2}), node({"CPU": 2, "node_b": 2})]
    _check(monkeypatch, config(placement={"nodes": TWO_BY_TWO}), two_nodes)  # fits
    with pytest.raises(PlacementError, match="need 8 CPUs; the cluster \\(2 nodes\\) has 4"):
        _check(monkeypatch, config(cpus_per_worker=2), two_nodes)
    dead_b = [two_nodes[0], node({"CPU": 2, "node_b": 2}, alive=False)]
    with pytest.raises(PlacementError, match="no node of the cluster has resource 'node_b'"):
        _check(monkeypatch, config(placement={"nodes": TWO_BY_TWO}, cpus_per_worker=0.5), dead_b)
    uneven = [{"resource": "node_a", "num_workers": 3}, {"resource": "node_b", "num_workers": 1}]
    with pytest.raises(
        PlacementError, match="'node_a' holds 2 workers \\(2 CPU\\), the slot asks 3"
    ):
        _check(monkeypatch, config(placement={"nodes": uneven}), two_nodes)
    few_cpus = [node({"CPU": 1, "node_a": 2}), node({"CPU": 3, "node_b": 2})]
    with pytest.raises(PlacementError, match="'node_a' holds 1 workers \\(1 CPU\\)"):
        _check(monkeypatch, config(placement={"nodes": TWO_BY_TWO}), few_cpus)


def test_a_gpu_run_on_a_cluster_with_fewer_gpus_is_refused(monkeypatch) -> None:
    live = config(device="cuda", num_gpus=4)
    monkeypatch.setattr(placement.ray, "nodes", lambda: [node({"CPU": 16, "GPU": 2})])
    bundles = placement.worker_bundles(live, base=bundle_for(live))
    with pytest.raises(PlacementError, match="need 4 GPUs; the cluster \\(1 node\\) has 2"):
        placement.check_capacity(live, bundles)


def test_unpinned_workers_are_numbered_node_by_node(monkeypatch) -> None:
    table = {"bundles_to_node_id": {"0": "n1", "1": "n2", "2": "n1", "3": "n2"}}
    monkeypatch.setattr(placement, "placement_group_table", lambda group: table)
    assert placement.bundle_order(object(), config()) == [0, 2, 1, 3]
    assert placement.bundle_nodes(object()) == ["n1", "n2"]
    # pinned slots keep the config's order: worker ids follow the slots
    assert placement.bundle_order(object(), config(placement={"nodes": TWO_BY_TWO})) == [0, 1, 2, 3]


def test_the_notes_say_where_every_worker_lived() -> None:
    infos = [
        {"node_id": "aaaaaaaaaa", "node_ip": "127.0.0.2"},
        {"node_id": "aaaaaaaaaa", "node_ip": "127.0.0.2"},
        {"node_id": "bbbbbbbbbb", "node_ip": "127.0.0.3"},
    ]
    assert placement.node_notes(infos) == [
        "nodes=2",
        "worker_nodes=aaaaaaaa@127.0.0.2,aaaaaaaa@127.0.0.2,bbbbbbbb@127.0.0.3",
    ]
