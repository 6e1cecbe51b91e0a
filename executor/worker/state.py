"""What a live worker owns whatever its role, shared by the worker's method groups.

The live worker's actor class is assembled from method groups: its own (`actor.LiveWorker`:
setup, roles, trainer state, one step) and every resize strategy's worker half (`host_sync.py`,
`overlapped.py` with `routed.py`, `stop_and_rebuild.py`), put together by the driver's strategy
registry (`actor.with_worker_halves`). They all read and write the state declared here, so each
group is type-checked against the same attributes.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from transformers import PreTrainedModel

from dynaresize.traces.phases import Role

from ..config import DeviceKind, LiveConfig
from ..roles import RoleMap
from .device_weights import DeviceWeightSync
from .engine import WorkerEngine
from .rollout import RolloutRole, sampling_params
from .trainer import TrainerRole


class WorkerState:
    """Device, model, groups and role of one worker; the base of the live worker's classes."""

    def __init__(self, *, worker_id: int, config_json: str) -> None:
        self.worker_id = worker_id
        self.config = LiveConfig.model_validate_json(config_json)
        torch.set_num_threads(self.config.torch_threads_per_worker)
        self.device = self._pick_device()
        self._model: PreTrainedModel | None = None
        self.role: Role | None = None
        self.trainer: TrainerRole | None = None
        self.rollout: RolloutRole | None = None
        self.engine = WorkerEngine(
            self.config, worker_id=worker_id, params=sampling_params(self.config)
        )
        """The rollout engine, which outlives the Rollout role (`rollout_engine.release`)."""
        self._device_sync = DeviceWeightSync()
        """This worker's side of the weight sync by CUDA IPC (published or mapped buffers)."""
        self.roles: RoleMap | None = None
        self.train_group: dist.ProcessGroup | None = None
        self.sync_group: dist.ProcessGroup | None = None
        self._pending_moments: dict[str, torch.Tensor] = {}
        """AdamW moments of a new slice, fetched by a weight restore, loaded by the next
        optimizer restore."""

    def _pick_device(self) -> torch.device:
        if self.config.device is DeviceKind.CPU:
            return torch.device("cpu")
        if not torch.cuda.is_available():
            raise RuntimeError(f"worker {self.worker_id}: device cuda asked but CUDA is absent")
        device = torch.device("cuda", 0)  # Ray sets CUDA_VISIBLE_DEVICES to the bundle's GPU
        torch.cuda.set_device(device)
        return device

    @property
    def rollout_engines_built(self) -> int:
        """Engine starts, rebuilds and wakes so far."""
        return self.engine.starts

    @property
    def model(self) -> PreTrainedModel:
        if self._model is None:
            raise RuntimeError(f"worker {self.worker_id} has not built its model yet")
        return self._model

    def _trainer(self) -> TrainerRole:
        if self.trainer is None:
            raise RuntimeError(f"worker {self.worker_id} is not a trainer (role {self.role})")
        return self.trainer

    def _rollout(self) -> RolloutRole:
        if self.rollout is None:
            raise RuntimeError(f"worker {self.worker_id} is not a rollout replica ({self.role})")
        return self.rollout

    def _role_map(self) -> RoleMap:
        if self.roles is None:
            raise RuntimeError(f"worker {self.worker_id} has no groups yet")
        return self.roles
