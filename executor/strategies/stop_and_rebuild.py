"""`stop_and_rebuild`: the baseline every fast resize is measured against.

What a framework without runtime resizing does to change its split: write a checkpoint to disk,
kill every worker actor, start new ones in the same placement group, form a new world process
group and the new split's groups, rebuild the model, and load the checkpoint back (model weights on
every worker, trainer slices re-cut from the old slices on disk). Nothing overlaps; every phase is
on the critical path. Only one checkpoint exists at a time: it is deleted once loaded.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from dynaresize.traces.phases import PhaseName, Role, StrategyName

from ..cluster.ray_cluster import PLACEMENT_GROUP_NAME, start_workers
from ..cluster.runtime import Runtime
from ..cluster.worker_setup import SetupPart
from ..roles import RoleMap
from ..worker.actor import LiveWorker
from ..worker.stop_and_rebuild import StopAndRebuildWorkerSide
from .host_sync import IN_PROCESS_SETUP_PARTS
from .strategy import PhaseLog, PhaseTiming, ResizeStrategy, Strategy

ActorFactory = Callable[[Runtime], list[Any]]
"""Starts a fresh set of worker actors for the runtime (one per bundle, same order)."""


def restart_workers(runtime: Runtime) -> list[Any]:
    """New worker actors of the run's actor class, in the run's placement group."""
    group = ray.util.get_placement_group(PLACEMENT_GROUP_NAME)
    return start_workers(runtime.config, group, actor_cls=runtime.actor_cls)


class StopAndRebuildStrategy(ResizeStrategy):
    name = StrategyName.STOP_AND_REBUILD

    def __init__(
        self,
        *,
        actor_factory: ActorFactory = restart_workers,
        checkpoint_root: str | None = None,
    ) -> None:
        self.actor_factory = actor_factory
        self.checkpoint_root = Path(checkpoint_root or tempfile.gettempdir())

    def resize(self, runtime: Runtime, *, target: RoleMap) -> list[PhaseTiming]:
        old = runtime.roles
        log = PhaseLog(runtime)
        version = runtime.weights_version
        folder = self.checkpoint_root / f"dynaresize-rebuild-{uuid.uuid4().hex[:12]}"
        try:
            with log.phase(PhaseName.STATE_EXPORT) as extra:
                saved = runtime.call(
                    old.trainer_ids,
                    StopAndRebuildWorkerSide.save_state_to_disk,
                    directory=str(folder),
                ).wait("writing the checkpoint")
                extra["bytes_moved"] = int(sum(r["bytes"] for r in saved.values()))

            with log.phase(PhaseName.ROLLOUT_RELEASE):
                # every engine ends with its actor: close them (and their processes) first
                runtime.call(runtime.all_ids, LiveWorker.close_rollout_engine).wait(
                    "closing rollout engines"
                )

            with log.phase(PhaseName.WORKER_REINIT):
                for actor in runtime.workers:
                    ray.kill(actor, no_restart=True)
                fresh = self.actor_factory(runtime)
                runtime.workers[:] = fresh  # the cluster's list too: it shuts these down
                runtime.roles = target
                runtime.call(runtime.all_ids, LiveWorker.info).wait("restarting workers")
                runtime.call(runtime.all_ids, LiveWorker.build_model).wait("rebuilding the model")

            with log.phase(PhaseName.COMM_PREWARM):
                infos = runtime.call([0], LiveWorker.info).wait("finding the rendezvous host")
                runtime.form_world(master_addr=infos[0]["node_ip"])
                runtime.call(runtime.all_ids, LiveWorker.bind_groups, roles=target).wait(
                    "building groups"
                )

            with log.phase(PhaseName.WEIGHT_RESTORE) as extra:
                loaded = runtime.call(
                    runtime.all_ids,
                    StopAndRebuildWorkerSide.load_model_from_disk,
                    directory=str(folder),
                ).wait("loading model weights")
                runtime.call(
                    target.trainer_ids,
                    LiveWorker.set_role,
                    role=Role.TRAIN,
                    weights_version=version,
                ).wait("becoming a trainer")
                runtime.call(target.trainer_ids, LiveWorker.bind_trainer_rank).wait("binding ranks")
                restored = runtime.call(
                    target.trainer_ids,
                    StopAndRebuildWorkerSide.restore_weights_from_disk,
                    directory=str(folder),
                    old_num_ranks=old.num_trainers,
                ).wait("loading trainer slices")
                extra["bytes_moved"] = int(sum(loaded.values()) + sum(restored.values()))

            with log.phase(PhaseName.OPTIMIZER_RESTORE):
                runtime.call(target.trainer_ids, LiveWorker.restore_optimizer).wait(
                    "restoring optimizer"
                )

            with log.phase(PhaseName.ROLLOUT_REINIT):
                runtime.call(
                    target.rollout_ids,
                    LiveWorker.set_role,
                    role=Role.ROLLOUT,
                    weights_version=version,
                ).wait("starting rollout replicas")
        finally:
            with log.phase(PhaseName.POSTPROCESS):
                shutil.rmtree(folder, ignore_errors=True)
        return log.phases


STOP_AND_REBUILD = Strategy(
    driver=StopAndRebuildStrategy,
    worker=StopAndRebuildWorkerSide,
    phases=(
        PhaseName.STATE_EXPORT,
        PhaseName.ROLLOUT_RELEASE,
        PhaseName.WORKER_REINIT,
        PhaseName.COMM_PREWARM,
        PhaseName.WEIGHT_RESTORE,
        PhaseName.OPTIMIZER_RESTORE,
        PhaseName.ROLLOUT_REINIT,
        PhaseName.POSTPROCESS,
    ),
    setup_parts=(
        SetupPart.ACTORS_STARTED,
        SetupPart.WORLD_GROUP,
        SetupPart.MODELS_BUILT,
        *IN_PROCESS_SETUP_PARTS,
    ),
)
