"""Ray for a live run: start or join a cluster, reserve one bundle per device, start the workers.

The placement group is created once and kept for the whole run. Resizes change what a worker
does, never which workers exist, so a resize never waits for Ray to schedule anything.
A local cluster listens on the loopback interface only; a cluster elsewhere is joined at
`address`.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from . import placement
from .config import DeviceKind, LiveConfig

if TYPE_CHECKING:
    from .worker import LiveWorker

PLACEMENT_TIMEOUT_S = 120.0
PLACEMENT_GROUP_NAME = "dynaresize-live"


class ClusterError(RuntimeError):
    """The cluster cannot hold the run (too few CPUs or GPUs for the bundles asked)."""


def worker_env() -> dict[str, str]:
    """Environment every worker starts with: one thread per library (workers share the cores)."""
    return {
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "NCCL_NVLS_ENABLE": "0",  # NVLink multicast stays off: the GPU machines require it
    }


def connect(*, address: str | None, config: LiveConfig) -> bool:
    """Join `address`, reuse a Ray session already started in this process, or start one.

    Returns True when this call started Ray (so the caller shuts it down at the end).
    """
    if ray.is_initialized():
        return False
    runtime_env = {"env_vars": worker_env()}
    if address is not None:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
        return True
    num_cpus = max(int(os.cpu_count() or 1), int(config.num_workers * config.cpus_per_worker) + 1)
    kwargs: dict[str, Any] = {"num_cpus": num_cpus}
    if config.device is DeviceKind.CUDA:
        kwargs["num_gpus"] = config.num_gpus
    ray.init(
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        runtime_env=runtime_env,
        log_to_driver=True,
        **kwargs,
    )
    return True


def bundle_for(config: LiveConfig) -> dict[str, float]:
    """Resources of one worker's bundle: a CPU share, and a GPU share when on CUDA."""
    bundle = {"CPU": config.cpus_per_worker}
    if config.device is DeviceKind.CUDA:
        bundle["GPU"] = gpu_share(config)
    return bundle


def gpu_share(config: LiveConfig) -> float:
    """Fraction of a GPU per worker: whole GPUs when there are enough, else an equal share."""
    if config.num_gpus >= config.num_workers:
        return 1.0
    workers_per_gpu = -(-config.num_workers // config.num_gpus)
    return 1.0 / workers_per_gpu


@dataclass
class Cluster:
    """The placement group and the long-lived worker actors, one per bundle."""

    placement: PlacementGroup
    workers: list[Any]
    started_ray: bool

    def shutdown(self) -> None:
        nodes = placement.bundle_nodes(self.placement)
        for worker in self.workers:
            with contextlib.suppress(Exception):  # already dead: nothing left to release
                ray.kill(worker, no_restart=True)
        remove_placement_group(self.placement)
        if len(nodes) > 1:  # shared memory and pipes of killed workers, on every node
            placement.sweep_nodes(nodes)
        if self.started_ray:
            ray.shutdown()


def reserve(config: LiveConfig) -> PlacementGroup:
    """One bundle per device, placed as `live.placement` says (packed onto as few nodes as the
    cluster allows unless told otherwise); a cluster that can never hold them is refused at
    once."""
    bundles = placement.worker_bundles(config, base=bundle_for(config))
    placement.check_capacity(config, bundles)
    group = placement_group(
        bundles, strategy=placement.ray_strategy(config), name=PLACEMENT_GROUP_NAME
    )
    ready, _ = ray.wait([group.ready()], timeout=PLACEMENT_TIMEOUT_S)
    if not ready:
        remove_placement_group(group)
        raise ClusterError(
            f"the cluster could not place {config.num_workers} bundles of {bundles[0]} within "
            f"{PLACEMENT_TIMEOUT_S:.0f} s (available: {ray.available_resources()})"
        )
    return group


def start_workers(
    config: LiveConfig, group: PlacementGroup, *, actor_cls: type[LiveWorker] | None = None
) -> list[Any]:
    """One worker actor per bundle; max_restarts=0 so a killed worker is reported, not hidden.

    `actor_cls` is the worker class (`LiveWorker` when None; tools pass a subclass of it).
    """
    if actor_cls is None:
        from .worker import LiveWorker  # here, not above: worker.py imports this module

        actor_cls = LiveWorker
    remote_cls = ray.remote(actor_cls)
    share = bundle_for(config)
    bundle_of = placement.bundle_order(group, config)  # the workers of a node: consecutive ids
    workers = []
    for worker_id in range(config.num_workers):
        strategy = PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=bundle_of[worker_id]
        )
        workers.append(
            remote_cls.options(
                num_cpus=share["CPU"],
                num_gpus=share.get("GPU", 0.0),
                scheduling_strategy=strategy,
                max_restarts=0,
                max_concurrency=1,
                name=None,
            ).remote(worker_id=worker_id, config_json=config.model_dump_json())
        )
    return workers


def free_port() -> int:
    """A TCP port free on this host right now (for the torch.distributed rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(config: LiveConfig, *, address: str | None) -> Cluster:
    started = connect(address=address, config=config)
    try:
        group = reserve(config)
    except Exception:
        if started:
            ray.shutdown()
        raise
    return Cluster(placement=group, workers=start_workers(config, group), started_ray=started)
