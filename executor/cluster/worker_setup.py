"""The workers' setup, before the first step: each part timed for `setup.json`.

    actors_started       every worker reports its process, host and device
    world_group          every worker joins one gloo world group
    models_built         every worker builds the model from the config (same seed, same weights)
    roles_taken          the role map's groups; trainers and replicas take their roles
    (resident_engines_built, with `rollout_engines: resident`)
    first_weight_sync    trainers load their ZeRO-1 slices (the model's own initial weights, or a
                         checkpoint's); the first trainer sends the weights to every replica

The parts are `SetupPart`s: a resize strategy names the parts its own resize repeats, and their
sum is the resize-cost prior before the run has measured a resize (`observe/setup_prior.py`).
The session runs the setup at the start of a run; tests and benchmarks that drive resizes
themselves (`testing/harness.py`) run the same steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from dynaresize.traces.phases import Role

from ..engines.config import EngineRelease
from ..run_folder.checkpoint import Checkpoint
from ..worker.actor import LiveWorker
from ..worker.shards import ShardLayout, shards_from_full
from ..worker.sync_paths import count_paths
from .runtime import Runtime


class SetupPart(str, Enum):
    """A timed part of the setup: its key in `setup.json`."""

    ACTORS_STARTED = "actors_started"
    WORLD_GROUP = "world_group"
    MODELS_BUILT = "models_built"
    ROLES_TAKEN = "roles_taken"
    RESIDENT_ENGINES_BUILT = "resident_engines_built"
    FIRST_WEIGHT_SYNC = "first_weight_sync"


@dataclass
class SetupReport:
    """What the setup found out and how long each part took."""

    numel: int
    """Parameters of the model."""
    worker_infos: list[dict[str, Any]]
    """`LiveWorker.info` of every worker, by worker id."""
    timings_s: dict[str, float] = field(default_factory=dict)
    """Seconds of each `SetupPart`, by its name."""
    first_sync_paths: dict[str, int] = field(default_factory=dict)
    """Replicas per weight-sync path at the first sync (`worker/sync_paths.py`)."""

    @property
    def device_name(self) -> str:
        return str(self.worker_infos[0]["device_name"])


class _Laps:
    """Seconds between successive marks on the run's clock."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.timings_s: dict[str, float] = {}
        self._last = runtime.clock()

    def __call__(self, name: SetupPart) -> None:
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
    on a first start) on every trainer and replica. The workers' infos go to `runtime.worker_infos`
    and to `on_started` as soon as they answer (the run folder gets them before anything else
    can fail)."""
    rt, lap = runtime, _Laps(runtime)
    answers = rt.call(rt.all_ids, LiveWorker.info).wait("starting")
    infos = [answers[w] for w in rt.all_ids]
    rt.worker_infos = infos
    lap(SetupPart.ACTORS_STARTED)
    on_started(infos)
    rt.form_world(master_addr=infos[0]["node_ip"])
    lap(SetupPart.WORLD_GROUP)
    numel = rt.call(rt.all_ids, LiveWorker.build_model).wait("building the model")[0]
    lap(SetupPart.MODELS_BUILT)
    version = restored.weights_version if restored else 0
    rt.weights_version = version
    take_roles(rt, weights_version=version, lap=lap)
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
    synced = rt.call(roles.sync_ids, LiveWorker.sync_weights, weights_version=version).wait(
        "first weight sync"
    )
    lap(SetupPart.FIRST_WEIGHT_SYNC)
    return SetupReport(
        numel=int(numel),
        worker_infos=infos,
        timings_s=lap.timings_s,
        first_sync_paths=count_paths(synced),
    )


def take_roles(
    runtime: Runtime,
    *,
    weights_version: int,
    lap: Callable[[SetupPart], None] = lambda _part: None,
) -> None:
    """The current role map's groups, every worker's role in it, and the trainers' ranks.

    With resident or sleeping rollout engines (`release: keep`, `sleep`) the trainers that some
    candidate split makes replicas build theirs here too (a sleeping one is put to sleep at once);
    a trainer under every candidate never needs one. `lap(part)` marks the end
    of the roles (`ROLES_TAKEN`) and of the resident engines (`RESIDENT_ENGINES_BUILT`).
    """
    rt, roles = runtime, runtime.roles
    rt.call(rt.all_ids, LiveWorker.bind_groups, roles).wait("building groups")
    for role, ids in ((Role.TRAIN, roles.trainer_ids), (Role.ROLLOUT, roles.rollout_ids)):
        rt.call(ids, LiveWorker.set_role, role, weights_version=weights_version).wait(
            "taking a role"
        )
    lap(SetupPart.ROLES_TAKEN)
    if rt.config.rollout_engine.release in (EngineRelease.KEEP, EngineRelease.SLEEP):
        future = roles.future_replicas(rt.config.candidates)
        rt.call(future, LiveWorker.prebuild_rollout_engine).wait("building resident engines")
        lap(SetupPart.RESIDENT_ENGINES_BUILT)
    rt.call(roles.trainer_ids, LiveWorker.bind_trainer_rank).wait("binding trainer ranks")
