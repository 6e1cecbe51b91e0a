"""Ray for a live run: start or join a cluster, reserve one bundle per device, start the workers.

The placement group is created once and kept for the whole run. Resizes change what a worker
does, never which workers exist, so a resize never waits for Ray to schedule anything.

A local cluster takes `LOCAL_NODE_IP` (127.0.0.2) as its node address: Ray keeps it (it rewrites
127.0.0.1 to the machine's routable address), so its agents, the workers' addresses and gloo stay
on loopback; Ray's gRPC servers (GCS, raylet, each process's core worker) and the autoscaler's
metrics server still listen on every interface (Ray 2.60 has no setting for them), guarded by
Ray's token authentication, with a token no other user can read (`auth.check_token_auth`).
docs/live-executor.md lists what listens where. A cluster elsewhere is joined at `address`, with
the same checks.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..config import DeviceKind, LiveConfig
from ..staging.ring import sweep_stale_pools
from ..worker.actor import LiveWorker
from . import placement
from .auth import check_cluster_requires_token, check_token_auth
from .shutdown import bounded

PLACEMENT_TIMEOUT_S = 120.0
PLACEMENT_GROUP_NAME = "dynaresize-live"
LOCAL_NODE_IP = "127.0.0.2"
"""Node address of a local cluster: on loopback, and not 127.0.0.1, which Ray rewrites."""
WORKER_EXIT_WAIT_S = 10.0
"""How long shutdown waits for killed workers to exit before sweeping their staging."""


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
    check_token_auth(address)
    if address is not None:
        gcs_known = "://" not in address and address not in ("auto", "local")
        if gcs_known:  # asked before the driver sends its token there
            check_cluster_requires_token(address, address)
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
        if not gcs_known:  # ray:// or a local cluster: ask from a node of the cluster
            try:
                gcs = ray.get(_cluster_gcs_address.remote())
                check_cluster_requires_token(address, gcs)
            except BaseException:
                ray.shutdown()
                raise
        return True
    num_cpus = max(int(os.cpu_count() or 1), int(config.num_workers * config.cpus_per_worker) + 1)
    kwargs: dict[str, Any] = {"num_cpus": num_cpus}
    if config.device is DeviceKind.CUDA:
        kwargs["num_gpus"] = config.num_gpus
    runtime_env["env_vars"]["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's pairs on loopback too
    ray.init(
        _node_ip_address=LOCAL_NODE_IP,
        include_dashboard=False,
        runtime_env=runtime_env,
        log_to_driver=True,
        **kwargs,
    )
    return True


@ray.remote(num_cpus=0)
def _cluster_gcs_address() -> str:
    """The GCS address as a node of the cluster sees it (a ray:// driver does not know it)."""
    return str(ray.get_runtime_context().gcs_address)


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
    actor_cls: type[LiveWorker]
    """The class the workers were started from (`strategies.catalog.live_worker_class`)."""
    worker_pids: list[int] = field(default_factory=list)
    """Process ids of the workers on this machine (set once they answer)."""
    notes: list[str] = field(default_factory=list)
    """What the trace's notes must say about the cluster (e.g. that it is oversubscribed)."""

    def shutdown(self) -> None:
        """Stop the workers, free the bundles and the staging they held, stop Ray if this run
        started it. Every step is bounded (`shutdown.bounded`): a dead GCS or raylet cannot keep
        the driver from exiting."""
        nodes: list[str] = []
        bounded(lambda: nodes.extend(placement.bundle_nodes(self.placement)), what="listing nodes")
        for worker in self.workers:
            with contextlib.suppress(Exception):  # already dead: nothing left to release
                ray.kill(worker, no_restart=True)
        wait_for_exit(self.worker_pids, timeout_s=WORKER_EXIT_WAIT_S)
        bounded(lambda: remove_placement_group(self.placement), what="removing the bundles")
        sweep_stale_pools()  # pools of killed workers on this machine
        if len(nodes) > 1:  # shared memory and pipes of killed workers, on every node
            bounded(lambda: placement.sweep_nodes(nodes), what="sweeping other nodes")
        if self.started_ray:
            bounded(ray.shutdown, what="stopping Ray")


def wait_for_exit(pids: list[int], *, timeout_s: float) -> None:
    """Wait until the processes `pids` on this machine have exited (at most `timeout_s`)."""
    import psutil

    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(pid))
    psutil.wait_procs(procs, timeout=timeout_s)


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
    config: LiveConfig, group: PlacementGroup, *, actor_cls: type[LiveWorker]
) -> list[Any]:
    """One worker actor per bundle; max_restarts=0 so a killed worker is reported, not hidden.

    `actor_cls` is the worker class: the live worker with every strategy's worker half
    (`strategies.catalog.live_worker_class`).
    """
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


def oversubscription(config: LiveConfig, *, address: str | None) -> str | None:
    """A note when the workers outnumber the cores (CPU runs) or the GPUs (CUDA runs) they run
    on: their timings then include contention, which calibration must not take as costs. A local
    run counts this machine's cores (Ray's CPU count is raised to fit the workers); a joined
    cluster, the CPUs it reports."""
    if config.device is DeviceKind.CUDA:
        if config.num_workers > config.num_gpus:
            return f"oversubscribed: {config.num_workers} workers on {config.num_gpus} GPUs"
        return None
    if address is None:
        cores = int(os.cpu_count() or 1)
    else:
        cores = int(ray.cluster_resources().get("CPU", 0))
    if config.num_workers > cores:
        return f"oversubscribed: {config.num_workers} workers on {cores} CPU cores"
    return None


def start(config: LiveConfig, *, address: str | None, actor_cls: type[LiveWorker]) -> Cluster:
    """Ray (joined or started), the run's placement group and one worker of `actor_cls` per
    bundle."""
    started = connect(address=address, config=config)
    try:
        group = reserve(config)
        note = oversubscription(config, address=address)
    except BaseException:  # Ctrl-C while waiting for the bundles too
        if started:
            bounded(ray.shutdown, what="stopping Ray")
        raise
    if note is not None:
        print(f"warning: {note}; its timings include contention", file=sys.stderr)
    return Cluster(
        placement=group,
        workers=start_workers(config, group, actor_cls=actor_cls),
        started_ray=started,
        actor_cls=actor_cls,
        notes=[note] if note else [],
    )
