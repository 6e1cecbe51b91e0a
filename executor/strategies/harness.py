"""Start live workers that carry the fast-resize half, outside the driver loop.

The strategies' tests and the resize benchmark need the executor's own workers, placement group,
world group and trainer state, but drive resizes themselves (a fixed sequence, each strategy in
turn on the same workers) instead of through a policy. This module does the driver's setup steps
for them and nothing else; `FastLiveWorker` is the live worker with `FastResizeWorker` mixed in.
"""

from __future__ import annotations

import time
from typing import Any

import ray
from dynaresize.traces.phases import Role
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..cluster import bundle_for, connect, reserve
from ..config import LiveConfig
from ..runtime import Runtime
from ..topology import Topology
from ..worker import LiveWorker
from .agent import FastResizeWorker


class FastLiveWorker(FastResizeWorker, LiveWorker):
    """The live worker with the worker-side methods of the fast strategies."""


def start_fast_workers(config: LiveConfig, group, *, actor_cls: type = FastLiveWorker) -> list:
    remote_cls = ray.remote(actor_cls)
    share = bundle_for(config)
    return [
        remote_cls.options(
            num_cpus=share["CPU"],
            num_gpus=share.get("GPU", 0.0),
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=worker_id
            ),
            max_restarts=0,
            max_concurrency=1,
        ).remote(worker_id=worker_id, config_json=config.model_dump_json())
        for worker_id in range(config.num_workers)
    ]


def setup_runtime(runtime: Runtime) -> int:
    """The driver's setup: world group, model, groups, roles, initial slices, first sync.

    Returns the number of model parameters.
    """
    rt = runtime
    infos = rt.run(rt.all_ids, "info", doing="starting")
    port = rt.run([0], "rendezvous_port", doing="starting")[0]
    rt.run(
        rt.all_ids,
        "join_world",
        doing="joining the world group",
        master_addr=infos[0]["node_ip"],
        master_port=port,
        world_size=len(rt.workers),
    )
    numel = rt.run(rt.all_ids, "build_model", doing="building the model")[0]
    topo = rt.topology
    rt.run(rt.all_ids, "bind_topology", doing="building groups", topology=topo)
    for role, ids in ((Role.TRAIN, topo.trainer_ids), (Role.ROLLOUT, topo.rollout_ids)):
        rt.run(ids, "set_role", doing="taking a role", role=role, weights_version=0)
    rt.run(topo.trainer_ids, "bind_trainer_rank", doing="binding trainer ranks")
    rt.run(topo.trainer_ids, "initial_shard", doing="loading initial weights")
    rt.run(topo.sync_ids, "sync_weights", doing="first weight sync", weights_version=0)
    return int(numel)


def start_runtime(config: LiveConfig) -> tuple[Runtime, Any, bool]:
    """Ray (joined or started), the placement group, fast workers, and the driver's setup."""
    started = connect(address=None, config=config)
    group = reserve(config)
    workers = start_fast_workers(config, group)
    runtime = Runtime(
        config=config,
        workers=workers,
        topology=Topology.for_allocation(config.initial_allocation),
        start_wall=time.perf_counter(),
    )
    setup_runtime(runtime)
    return runtime, group, started


def restart_fast_workers(runtime: Runtime) -> list:
    """Actor factory for `stop_and_rebuild` when the workers are `FastLiveWorker`s."""
    from .stop_and_rebuild import PLACEMENT_GROUP_NAME

    group = ray.util.get_placement_group(PLACEMENT_GROUP_NAME)
    return start_fast_workers(runtime.config, group)
