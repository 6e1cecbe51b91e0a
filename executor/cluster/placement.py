"""Workers over the nodes of a Ray cluster: bundles, checks before anything starts, the node map.

- `worker_bundles`: one bundle per worker, pinned to a node by a resource only it has where
  `live.placement.nodes` says so;
- `check_address` and `check_capacity`: an address that does not answer, a cluster with fewer
  CPUs or GPUs than the run asks, or a node slot the cluster cannot hold are refused with one
  line (`PlacementError`, a `ConfigError`: exit code 2) before any worker starts, instead of a
  connection that hangs or a placement group that waits for minutes;
- `bundle_order`: which bundle each worker id takes, so that the workers of one node have
  consecutive ids (trainers are the lowest ids, so a split at a node boundary gives each role
  whole nodes);
- `node_notes`: the node of every worker, for the trace's notes;
- `sweep_nodes`: on every node of a multi-node run, remove the staging segments and pipes that
  killed workers could not (a worker killed by a signal cannot clean up, and only a process on
  its own node can reach its shared memory; on a single node this is left to the staging
  package's own sweep, which every new pool runs).
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import ray
from ray.util import placement_group_table
from ray.util.placement_group import PlacementGroup
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from dynaresize.config_io import ConfigError

from ..config import LiveConfig
from ..placement_config import PlacementStrategy

ADDRESS_TIMEOUT_S = 5.0
SWEEP_WAIT_S = 10.0


class PlacementError(ConfigError):
    """The cluster cannot hold the run as configured (address, devices, node slots)."""


# --- before Ray ------------------------------------------------------------------------------


def check_address(address: str | None) -> None:
    """An explicit `HOST:PORT` (or `ray://HOST:PORT`) must accept a connection within a few
    seconds; `auto` and `local` are left to Ray."""
    if address is None or address in ("auto", "local"):
        return
    target = address.split("://", 1)[-1]
    host, _, port_text = target.rpartition(":")
    if not host or not port_text.isdigit():
        raise PlacementError(f"--address {address}: not of the form HOST:PORT")
    try:
        target_host = host.strip("[]")  # an IPv6 address in brackets
        with socket.create_connection((target_host, int(port_text)), timeout=ADDRESS_TIMEOUT_S):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise PlacementError(
            f"--address {address}: no Ray cluster answers there ({reason})"
        ) from None


# --- bundles and their nodes -----------------------------------------------------------------


def worker_bundles(config: LiveConfig, *, base: dict[str, float]) -> list[dict[str, float]]:
    """One bundle per worker, in worker-id order: `base` (its CPU and GPU share), plus the node
    resource of the slot the worker is pinned to."""
    slots = config.placement.nodes
    if not slots:
        return [dict(base) for _ in range(config.num_workers)]
    bundles = []
    for slot in slots:
        bundles += [base | {slot.resource: slot.units_per_worker}] * slot.num_workers
    return bundles


def ray_strategy(config: LiveConfig) -> str:
    """Ray's placement-group strategy for the run's bundles."""
    return "SPREAD" if config.placement.strategy is PlacementStrategy.SPREAD else "PACK"


def check_capacity(config: LiveConfig, bundles: Sequence[dict[str, float]]) -> None:
    """Refuse, with one line, a run the cluster can never hold: fewer CPUs or GPUs in total than
    the bundles ask, or a pinned node slot that its node cannot hold (its resource, CPUs or GPUs).
    A cluster that holds the run but is busy is waited for, as before."""
    alive = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    total: Counter[str] = Counter()
    for resources in alive:
        total.update(resources)
    asked: Counter[str] = Counter()
    for bundle in bundles:
        asked.update(bundle)
    for key in ("CPU", "GPU"):
        if asked[key] > total[key] + 1e-9:
            raise PlacementError(_short_of(config, key, asked[key], total[key], len(alive)))
    base = {k: v for k, v in (bundles[0] if bundles else {}).items() if k in ("CPU", "GPU")}
    for slot in config.placement.nodes:
        holders = [r for r in alive if r.get(slot.resource, 0.0) > 0]
        if not holders:
            raise PlacementError(
                f"placement.nodes: no node of the cluster has resource {slot.resource!r}"
            )
        fits = sum(_workers_fitting(r, base, slot.resource, slot.units_per_worker) for r in holders)
        if fits < slot.num_workers:
            raise PlacementError(
                f"placement.nodes: the node with {slot.resource!r} holds {fits} workers "
                f"({_describe(holders[0], base)}), the slot asks {slot.num_workers}"
            )


def _short_of(config: LiveConfig, key: str, asked: float, have: float, num_nodes: int) -> str:
    what = "CPUs" if key == "CPU" else "GPUs"
    per = config.cpus_per_worker if key == "CPU" else asked / config.num_workers
    field = "cpus_per_worker" if key == "CPU" else "GPU share"
    nodes = f"{num_nodes} node" + ("" if num_nodes == 1 else "s")
    return (
        f"live.num_workers: {config.num_workers} workers x {per:g} {field} need {asked:g} "
        f"{what}; the cluster ({nodes}) has {have:g}"
    )


def _workers_fitting(
    resources: dict[str, float], base: dict[str, float], resource: str, units: float
) -> int:
    """Workers of bundle `base` plus `units` of `resource` that one node's resources hold."""
    limits = [resources.get(resource, 0.0) / units]
    limits += [resources.get(k, 0.0) / v for k, v in base.items() if v > 0]
    return int(min(limits) + 1e-9)


def _describe(resources: dict[str, float], base: dict[str, float]) -> str:
    keys = [k for k in ("CPU", "GPU") if k in base]
    return ", ".join(f"{resources.get(k, 0.0):g} {k}" for k in keys)


def bundle_order(group: PlacementGroup, config: LiveConfig) -> list[int]:
    """The bundle each worker id takes. Pinned slots keep their order (worker ids follow the
    slots); otherwise the bundles are grouped by node, in the order Ray placed them, so the
    workers of one node get consecutive ids."""
    if config.placement.nodes:
        return list(range(config.num_workers))
    node_of = {int(k): v for k, v in placement_group_table(group)["bundles_to_node_id"].items()}
    first_index: dict[str, int] = {}
    for index in sorted(node_of):
        first_index.setdefault(node_of[index], index)
    return sorted(node_of, key=lambda index: (first_index[node_of[index]], index))


def bundle_nodes(group: PlacementGroup) -> list[str]:
    """The node id of every bundle of the group (distinct, in bundle order)."""
    node_of = placement_group_table(group)["bundles_to_node_id"]
    return list(dict.fromkeys(node_of[k] for k in sorted(node_of, key=int)))


def node_notes(infos: Sequence[dict[str, Any]]) -> list[str]:
    """The trace notes that say where the workers lived: the node count and, per worker, its
    node (short id and address)."""
    nodes = [f"{str(info.get('node_id', '?'))[:8]}@{info.get('node_ip', '?')}" for info in infos]
    return [f"nodes={len(set(nodes))}", f"worker_nodes={','.join(nodes)}"]


# --- after the run ---------------------------------------------------------------------------


def _sweep_here(wait_s: float) -> int:
    """On one node: remove staging pools whose owner has died. Workers killed a moment ago may
    still be exiting; while a pool's owner is alive and a child of this node's raylet (as the
    run's workers were, and as this task is), wait for it, up to `wait_s`."""
    from ..staging.ring import sweep_stale_pools

    removed = sweep_stale_pools()
    deadline = time.monotonic() + wait_s
    while _exiting_ray_workers() and time.monotonic() < deadline:
        time.sleep(0.1)  # waiting for killed processes to exit, not standing in for work
        removed += sweep_stale_pools()
    return removed


def _exiting_ray_workers() -> list[int]:
    """Owners of staging pools on this node that are alive and share this process's parent."""
    import psutil

    from ..staging.ring import POOL_PREFIX, staging_entries

    owners = set()
    for path in staging_entries():
        head = os.path.basename(path)[len(POOL_PREFIX) :].split("-", 1)[0]
        if head.isdigit():
            owners.add(int(head))
    alive = []
    for pid in owners:
        try:
            if psutil.Process(pid).ppid() == os.getppid():
                alive.append(pid)
        except psutil.Error:
            continue
    return alive


def sweep_nodes(node_ids: Iterable[str], *, wait_s: float = SWEEP_WAIT_S) -> dict[str, int]:
    """Run the sweep on every given node (a zero-CPU task pinned there); segments removed by
    node. Best effort: a node that is gone has nothing left to sweep."""
    nodes = list(node_ids)
    sweep = ray.remote(num_cpus=0, max_retries=0)(_sweep_here)
    # The sweep may outlast its bound on a loaded machine and go on after the run has stopped
    # Ray: a remote call then would start a new local Ray in this process (and a later
    # ray.init in it crashed), so none is made once Ray is down.
    refs = {}
    for node in nodes:
        if not ray.is_initialized():
            break
        refs[node] = sweep.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        ).remote(wait_s)
    removed: dict[str, int] = {node: -1 for node in nodes}
    for node, ref in refs.items():
        if not ray.is_initialized():
            break
        try:
            removed[node] = int(ray.get(ref, timeout=wait_s + 60.0))
        except Exception:  # a dead node, or a cluster going down: nothing to do there
            removed[node] = -1
    return removed
