"""The workers' setup, before the first step: each part timed for `setup.json`.

    actors_started       every worker reports its process, host and device
    world_group          every worker joins one gloo world group
    models_built         every worker builds the model from the config (same seed, same weights)
    roles_taken          the role map's groups; trainers and replicas take their roles
    (resident_engines_built, with `rollout_engines: resident`)
    first_weight_sync    trainers load their ZeRO-1 slices (the model's own initial weights, or a
                         checkpoint's); the first trainer sends the weights to every replica

The driver runs it at the start of a run; tests and benchmarks that drive resizes themselves
(`strategies/harness.py`) run the same steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..run_folder.checkpoint import Checkpoint
from ..worker.actor import LiveWorker
from ..worker.shards import ShardLayout, shards_from_full
from .runtime import Runtime


@dataclass
class SetupReport:
    """What the setup found out and how long each part took."""

    numel: int
    """Parameters of the model."""
    worker_infos: list[dict[str, Any]]
    """`LiveWorker.info` of every worker, by worker id."""
    timings_s: dict[str, float] = field(default_factory=dict)

    @property
    def device_name(self) -> str:
        return str(self.worker_infos[0]["device_name"])


class _Laps:
    """Seconds between successive marks on the run's clock."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.timings_s: dict[str, float] = {}
        self._last = runtime.clock()

    def __call__(self, name: str) -> None:
        now = self.runtime.clock()
        self.timings_s[name] = now - self._last
        self._last = now


def set_up_workers(
    runtime: Runtime,
    *,
    restored: Checkpoint | None = None,
    on_started: Callable[[list[dict[str, Any]]], None] = lambda _infos: None,
) -> SetupReport:
    """Bring every worker from a fresh actor to its role, with weights version `restored`'s (0
    on a first start) on every trainer and replica. `on_started` gets the workers' infos as soon
    as they answer (the driver writes them out before anything else can fail)."""
    rt, lap = runtime, _Laps(runtime)
    answers = rt.call(rt.all_ids, LiveWorker.info).wait("starting")
    infos = [answers[w] for w in rt.all_ids]
    lap("actors_started")
    on_started(infos)
    rt.form_world(master_addr=infos[0]["node_ip"])
    lap("world_group")
    numel = rt.call(rt.all_ids, LiveWorker.build_model).wait("building the model")[0]
    lap("models_built")
    version = restored.weights_version if restored else 0
    rt.weights_version = version
    rt.take_roles(weights_version=version, lap=lap)
    roles = rt.roles
    if restored is None:
        rt.call(roles.trainer_ids, LiveWorker.initial_shard).wait("loading initial weights")
    else:
        layout = ShardLayout(numel=numel, num_ranks=roles.num_trainers)
        shards = shards_from_full(restored.vectors, layout, optimizer_step=version)
        rt.call_each(
            rt.call([w], LiveWorker.load_shard, shards[roles.trainer_rank(w)])
            for w in roles.trainer_ids
        ).wait("loading the checkpoint")
        rt.call(roles.trainer_ids, LiveWorker.refresh_model_from_master).wait("gathering weights")
    rt.call(roles.sync_ids, LiveWorker.sync_weights, weights_version=version).wait(
        "first weight sync"
    )
    lap("first_weight_sync")
    return SetupReport(
        numel=int(numel),
        worker_infos=infos,
        timings_s=lap.timings_s,
    )
