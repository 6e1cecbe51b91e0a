"""One long-lived worker per device: holds a role, switches role in-process.

The worker owns what outlives a role: its device (CUDA context included), its model object, its
membership in the world process group and the groups of the current split. A role (trainer or
rollout replica) is a small object built on top; switching role drops one object and builds the
other, with no actor teardown and no new process, which is what keeps a resize cheap.

Methods are called by the driver through Ray (`cluster/runtime.py`); collective methods must be
called on every member of the group at once. A resize strategy's worker half (`host_sync.py`,
`overlapped.py`, `stop_and_rebuild.py`) is a class of methods over the same `WorkerState`; the
driver's strategy registry (`strategies/catalog.py`) names them, and `with_worker_halves`
makes the actor class of the live worker and all of them.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import ray
import torch
import torch.distributed as dist

from dynaresize.traces.phases import Role

from ..batch import RolloutSample
from ..job.live_job import replica_scorer, rollout_shape
from ..job.prompt_source import PromptItem
from ..rl.model import build_model, count_parameters
from ..rl.weights_digest import parameters_digest, weights_digest
from ..roles import RoleMap
from .collectives import choose_path, device_key
from .device_weights import over_network, sync_on_device, sync_result
from .rollout import RolloutReport, RolloutRole, sampler_config, sampling_params
from .shards import ShardLayout, ShardState
from .state import WorkerState
from .sync_paths import SyncPath, SyncPlan
from .trainer import TrainerRole, TrainReport

COLLECTIVE_TIMEOUT = timedelta(minutes=10)


class LiveWorker(WorkerState):
    """The worker's own methods, whatever the resize strategy; its state is declared in
    `WorkerState`. The class a Ray actor is made of adds every strategy's worker half to it
    (`with_worker_halves`)."""

    _fault_stale_weights: bool = False
    """Fault injection (`inject_fault`): as a replica, advance the weights version label at a
    weight sync without loading the weights."""

    _world_store: dist.TCPStore | None = None
    """The world group's store, on worker 0 of a run across nodes (`open_rendezvous`)."""

    # --- setup ---------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """Process id, node and host: for fault reports, the node map of the records and the path
        of every move, and for tests that kill a worker."""
        return {
            "worker_id": self.worker_id,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "device": str(self.device),
            "device_name": (
                torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"
            ),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "rollout_engines_built": self.rollout_engines_built,
            "rollout_engine_starts": self.engine.start_timings,
        }

    def open_rendezvous(self, *, node_ip: str, world_size: int) -> int:
        """Open the world group's meeting point on this worker: a TCP store that listens on
        `node_ip` (this node's cluster address) only, where torch's own would listen on every
        interface. Returns its port; the store lives as long as the worker."""
        family = socket.AF_INET6 if ":" in node_ip else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.bind((node_ip, 0))
            listener.listen(max(world_size, 128))
            port = int(listener.getsockname()[1])
        except OSError:
            listener.close()
            raise
        self._world_store = dist.TCPStore(
            node_ip,
            port,
            world_size,
            is_master=True,
            timeout=COLLECTIVE_TIMEOUT,
            wait_for_workers=False,
            master_listen_fd=listener.detach(),  # the store owns the bound socket from here on
        )
        return port

    def join_world(
        self, *, master_addr: str, master_port: int, world_size: int, init_method: str | None = None
    ) -> float:
        """Join the world gloo group (every worker, created once for the whole run), through
        `init_method` when given (a file on one machine), else at the TCP store worker 0 opened
        on `master_addr` (`open_rendezvous`)."""
        start = time.perf_counter()
        store = None
        if init_method is None:
            store = self._world_store  # worker 0's own, after `open_rendezvous`
            if store is None:
                store = dist.TCPStore(
                    master_addr,
                    master_port,
                    world_size,
                    is_master=False,
                    timeout=COLLECTIVE_TIMEOUT,
                )
        dist.init_process_group(
            backend="gloo",
            init_method=init_method,
            store=store,
            rank=self.worker_id,
            world_size=world_size,
            timeout=COLLECTIVE_TIMEOUT,
        )
        return time.perf_counter() - start

    def build_model(self) -> int:
        """Build the model from the config's spec (same seed on every worker: same weights)."""
        self._model = build_model(self.config.model, device=self.device)
        self._model.requires_grad_(True)
        return count_parameters(self._model)

    def leave_world(self) -> int:
        """Destroy every process group of this worker at the end of a run that ended well: the
        communicator cache's, those built at setup and at resizes, and the world group. Returns
        how many groups there were."""
        cache = getattr(self, "_comm_cache", None)
        if cache is not None:
            cache.close()
        count = 0
        if dist.is_initialized():
            count = len(dist.distributed_c10d._world.pg_map)
            dist.destroy_process_group()
        self.train_group = None
        self.sync_group = None
        return count

    # --- groups and roles -----------------------------------------------------------------

    def bind_groups(self, roles: RoleMap) -> float:
        """Create the trainer group and the weight-sync group of `roles` (world collective)."""
        start = time.perf_counter()
        old = [g for g in (self.train_group, self.sync_group) if g is not None]
        self.train_group = dist.new_group(list(roles.trainer_ids))
        self.sync_group = dist.new_group(list(roles.sync_ids))
        self.roles = roles
        warm = torch.zeros(1)
        if self.worker_id in roles.trainer_ids:
            dist.all_reduce(warm, group=self.train_group)
        if self.worker_id in roles.sync_ids:
            dist.all_reduce(warm, group=self.sync_group)
        for group in old:
            if group is not dist.GroupMember.NON_GROUP_MEMBER:
                dist.destroy_process_group(group)
        return time.perf_counter() - start

    def set_role(self, role: Role, *, weights_version: int) -> float:
        """Switch to `role` in-process; a trainer's state comes with load_* calls after this.
        A replica that leaves releases its engine here unless `release_rollout_engine` did."""
        start = time.perf_counter()
        if role is self.role:
            return 0.0
        if self.rollout is not None:
            self.engine.release()
        self.trainer = None
        self.rollout = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        if role is Role.TRAIN:
            self.trainer = TrainerRole(
                worker_id=self.worker_id,
                model=self.model,
                device=self.device,
                settings=self.config.optimizer,
                objective=self.config.objective,
                micro_batch_samples=self.config.micro_batch_samples,
                micro_batch_tokens=self.config.micro_batch_tokens,
                activation_checkpointing=self.config.activation_checkpointing,
            )
        else:
            self.rollout = self._build_rollout_role(weights_version)
        self.role = role
        return time.perf_counter() - start

    def release_rollout_engine(self) -> float:
        """A replica about to leave Rollout releases its engine (destroy, sleep or keep, as
        configured): the `rollout_release` phase. Seconds taken; 0 on a worker that is no
        replica."""
        return self.engine.release() if self.rollout is not None else 0.0

    def close_rollout_engine(self) -> None:
        """End the engine and its process (end of the run, or before the actor is killed)."""
        self.engine.close()

    def prebuild_rollout_engine(self) -> float:
        """Resident engines (`release: keep`): a trainer builds the engine it will use as a
        replica now, at setup, so that no resize has to start one. Seconds taken (0 where one is
        held already)."""
        return self.engine.prebuild(self.model)

    def _build_rollout_role(self, weights_version: int) -> RolloutRole:
        engine, digest = self.engine.acquire(self.model)
        shape = rollout_shape(self.config)
        return RolloutRole(
            worker_id=self.worker_id,
            model=self.model,
            scorer=replica_scorer(self.config),
            sampler=sampler_config(self.config, shape),
            params=sampling_params(self.config, shape),
            samples_per_prompt=self.config.samples_per_prompt,
            weights_version=weights_version,
            engine=engine,
            weights_digest=digest,
        )

    def bind_trainer_rank(self) -> None:
        """Take this worker's trainer rank of the current split, and the collective path of
        its trainer group (a collective over the trainer group: every trainer calls it)."""
        roles = self._role_map()
        rank = roles.trainer_rank(self.worker_id)
        layout = ShardLayout(numel=count_parameters(self.model), num_ranks=roles.num_trainers)
        keys: list[str] = [device_key(self.device)]
        if roles.num_trainers > 1:
            keys = [""] * roles.num_trainers
            dist.all_gather_object(keys, device_key(self.device), group=self.train_group)
        choice = choose_path(keys, device_type=self.device.type)
        group = self.train_group
        if choice.backend == "nccl":
            group = self._nccl_group(roles.trainer_ids)
        sharing = sum(key == keys[rank] for key in keys)
        self._trainer().bind(
            group=group, rank=rank, layout=layout, path=choice, sharing_trainers=sharing
        )

    def _nccl_group(self, trainer_ids: tuple[int, ...]) -> dist.ProcessGroup:
        """The NCCL group of these trainers on distinct GPUs, built by its members only and
        kept for later splits with the same trainers."""
        cache: dict[tuple[int, ...], dist.ProcessGroup] = self.__dict__.setdefault(
            "_nccl_groups", {}
        )
        if trainer_ids not in cache:
            group = dist.new_group(
                list(trainer_ids), backend="nccl", use_local_synchronization=True
            )
            if group is None or group is dist.GroupMember.NON_GROUP_MEMBER:
                raise RuntimeError(f"worker {self.worker_id}: no NCCL group of {trainer_ids}")
            cache[trainer_ids] = group
        return cache[trainer_ids]

    # --- trainer state -------------------------------------------------------------------

    def export_shard(self) -> ShardState:
        return self._trainer().export_shard()

    def trainer_numel(self) -> int:
        return count_parameters(self.model)

    def initial_shard(self, *, optimizer_step: int = 0) -> float:
        """First start: this rank's slice of the model's own (identical) initial weights."""
        start = time.perf_counter()
        trainer = self._trainer()
        flat = self.flat_weights()
        lo, hi = trainer.layout.bounds(trainer.rank)
        trainer.load_weights(flat[lo:hi], optimizer_step=optimizer_step)
        trainer.load_moments({})
        return time.perf_counter() - start

    def load_shard(self, shard: ShardState) -> None:
        """Take a whole slice at once (a checkpoint restore)."""
        self._trainer().load_shard(shard)

    def restore_optimizer(self) -> float:
        """Load the moments a weight restore staged (from host or from disk) into this rank's
        AdamW."""
        start = time.perf_counter()
        self._trainer().load_moments(self._pending_moments)
        self._pending_moments = {}
        return time.perf_counter() - start

    def refresh_model_from_master(self) -> float:
        """All-gather the master slices into the model (trainer-group collective)."""
        start = time.perf_counter()
        self._trainer().refresh_model()
        return time.perf_counter() - start

    # --- one step ------------------------------------------------------------------------

    def train(self, samples: list[RolloutSample], *, num_batch_tokens: int) -> TrainReport:
        return self._trainer().train(samples, num_batch_tokens=num_batch_tokens)

    def generate(self, *, batch_id: int, items: list[PromptItem]) -> RolloutReport:
        """Generate and score the driver's prompts of batch `batch_id`."""
        return self._rollout().generate(batch_id=batch_id, items=items)

    def sync_weights(self, *, weights_version: int) -> dict[str, Any]:
        """Send the model from the first trainer to every rollout replica (sync group).

        On CUDA each replica takes its own path (`device_weights.py`): from the trainer's device
        buffer where it maps it, else a host vector over the network; on CPU every replica takes
        the network path. Each side reports the digest of the weights: the source of what it
        sent, a replica of what its engine loaded (the driver checks that they agree).
        """
        start = time.perf_counter()
        source = self._role_map().trainer_ids[0]
        parameters = list(self.model.parameters())
        take = functools.partial(self._take_weights, weights_version=weights_version)
        if parameters[0].is_cuda:
            return sync_on_device(
                self._device_sync,
                worker_id=self.worker_id,
                model_parameters=parameters,
                source=source,
                group=self.sync_group,
                load=take,
            )
        plan = SyncPlan.of(
            source,
            ((w, None if w == source else SyncPath.NETWORK) for w in self._role_map().sync_ids),
        )
        flat = over_network(
            parameters, worker_id=self.worker_id, source=source, plan=plan, group=self.sync_group
        )
        assert flat is not None  # every member takes part in an all-network sync
        digest = weights_digest(flat) if self.worker_id == source else None
        if self.rollout is not None:
            digest = take(flat)
        return sync_result(
            worker_id=self.worker_id,
            plan=plan,
            nbytes=flat.view(torch.uint8).numel(),
            start_s=start,
            digest=digest,
        )

    def _take_weights(self, flat: torch.Tensor, weights_version: int) -> str | None:
        """A replica takes the synced weights into its engine (and model); the digest of what
        its engine loaded."""
        assert self.rollout is not None
        if self._fault_stale_weights:
            # injected fault: the label advances, the engine keeps the weights it had
            self.rollout.weights_version = weights_version
            return self.rollout.weights_digest
        digest = self.engine.load(self.model, flat)
        self.rollout.load_weights(flat, weights_version=weights_version, weights_digest=digest)
        return digest

    def weights_fingerprint(self) -> str:
        """`rl.weights_digest` of this worker's model weights as they are now: on the first
        trainer right after a weight sync, the digest of the weights it published."""
        return parameters_digest(self.model.parameters())

    def inject_fault(self, kind: str) -> None:
        """Fault injection for tests of the run's own checks, never used by a run.

        `stale_weights`: from now on, as a rollout replica, take each weight sync's version
        label but keep the old weights, the fault the lineage check must catch from the digests
        (a version counter alone would pass it)."""
        if kind != "stale_weights":
            raise ValueError(f"inject_fault: unknown fault {kind!r}")
        self._fault_stale_weights = True

    def flat_weights(self) -> torch.Tensor:
        """The model's weights as one host vector (tests compare runs with it)."""
        return torch.cat([p.detach().reshape(-1).float().cpu() for p in self.model.parameters()])


def with_worker_halves(
    base: type[LiveWorker], halves: Sequence[type[WorkerState]]
) -> type[LiveWorker]:
    """The actor class: `base` (the live worker, or a subclass of it) with the methods of every
    worker half in `halves`, each once. Named after `base`, so the actor keeps its name in Ray's
    listings."""
    listed = tuple(dict.fromkeys(halves))
    # a half that another one builds on (overlapped on host_sync) comes in through that one
    unique = tuple(
        h
        for h in listed
        if not issubclass(base, h) and not any(o is not h and issubclass(o, h) for o in listed)
    )
    if not unique:
        return base
    return type(base.__name__, (base, *unique), {"__doc__": base.__doc__})
