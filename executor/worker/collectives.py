"""How the trainer group reduces gradients and gathers weights: the path, chosen per group.

- `none`:   a single trainer; nothing to reduce or gather.
- `device`: the tensors stay on the trainers' devices: NCCL between trainers on distinct GPUs,
            gloo between CPU trainers (where the device is host memory). Both run the same code,
            so CPU tests cover the NCCL path's logic.
- `ipc`:    every trainer of the group on one GPU (NCCL cannot join two ranks on the same
            device): each rank maps the others' staging buffers through CUDA IPC and reads them
            on the device; gloo carries only the handles and the barriers (`same_device.py`).
- `host`:   some but not all trainers share a GPU, or the IPC mapping was refused: the gradient
            and the weight slices are copied to host memory and travel over gloo.

`choose_path` decides from the device of every trainer in the group, and says why; the run's
trace notes carry the reason (`collective_note`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import torch
import torch.distributed as dist

from .same_device import IpcRefused, SameDeviceExchange


class CollectivePath(str, Enum):
    NONE = "none"
    DEVICE = "device"
    IPC = "ipc"
    HOST = "host"


@dataclass(frozen=True)
class PathChoice:
    path: CollectivePath
    backend: str | None
    """The process-group backend the path runs over (None for a single trainer)."""
    reason: str


def choose_path(device_keys: Sequence[str], *, device_type: str) -> PathChoice:
    """The path of a trainer group whose members' devices are `device_keys` (one per trainer,
    the same key for the same physical device)."""
    if len(device_keys) <= 1:
        return PathChoice(CollectivePath.NONE, None, "a single trainer: no collective")
    if device_type != "cuda":
        return PathChoice(CollectivePath.DEVICE, "gloo", "CPU trainers: gloo on host tensors")
    if len(set(device_keys)) == 1:
        return PathChoice(
            CollectivePath.IPC,
            "gloo",
            "trainers share one GPU (NCCL cannot join two ranks on one device): "
            "device buffers through CUDA IPC, gloo for handles and barriers",
        )
    if len(set(device_keys)) < len(device_keys):
        return PathChoice(
            CollectivePath.HOST,
            "gloo",
            "some trainers share a GPU, not all (NCCL cannot join two ranks on one device): "
            "gloo via host",
        )
    return PathChoice(CollectivePath.DEVICE, "nccl", "trainers on distinct GPUs: NCCL")


def collective_note(*, device_type: str, num_workers: int, num_gpus: int) -> str:
    """The trace note on the trainers' collectives, from the run's shape (workers over GPUs)."""
    if device_type != "cuda":
        keys = ["cpu"] * 2
    elif num_gpus == 1:
        keys = ["gpu0"] * 2
    elif num_workers > num_gpus:
        keys = ["gpu0", "gpu0", "gpu1"]  # trainer groups that span GPUs, some sharing one
    else:
        keys = ["gpu0", "gpu1"]
    choice = choose_path(keys, device_type=device_type)
    single = choose_path(keys[:1], device_type=device_type)
    return (
        f"trainer_collectives={choice.path.value}/{choice.backend} "
        f"({choice.reason}; {single.reason})"
    )


def device_key(device: torch.device) -> str:
    """The physical device a worker trains on, as the same string on every process."""
    if device.type != "cuda":
        return "cpu"
    return str(torch.cuda.get_device_properties(device).uuid)


class TrainerCollectives:
    """The all-reduce of the flat gradient and the all-gather of the master slices of one
    trainer group, on the group's path.

    On the ipc path the staging buffers (`staging_numel` fp32 elements per rank: the group's
    padded flat buffer) are built at the group's first collective, which every rank calls at
    once; if any rank cannot map them, every rank takes the host path instead and the choice's
    reason says why."""

    def __init__(
        self,
        choice: PathChoice,
        group: dist.ProcessGroup | None,
        *,
        rank: int = 0,
        staging_numel: int = 0,
    ) -> None:
        if choice.path is not CollectivePath.NONE and group is None:
            raise ValueError(f"collective path {choice.path.value} needs a process group")
        if choice.path is CollectivePath.IPC and staging_numel <= 0:
            raise ValueError("the ipc path needs the size of the group's flat buffer")
        self.choice = choice
        self.group = group
        self.rank = rank
        self.staging_numel = staging_numel
        self._exchange: SameDeviceExchange | None = None

    def _ipc(self, device: torch.device) -> SameDeviceExchange | None:
        """The group's staging buffers (built on first use), or None once IPC was refused."""
        if self.path is not CollectivePath.IPC:
            return None
        if self._exchange is None:
            try:
                self._exchange = SameDeviceExchange(
                    self.group, rank=self.rank, numel=self.staging_numel, device=device
                )
            except IpcRefused as err:
                self.choice = PathChoice(
                    CollectivePath.HOST, "gloo", f"CUDA IPC refused ({err}): gloo via host"
                )
                return None
        return self._exchange

    def close(self) -> None:
        """Release the ipc path's buffers (the trainer leaves this group)."""
        if self._exchange is not None:
            self._exchange.close()
            self._exchange = None

    @property
    def path(self) -> CollectivePath:
        return self.choice.path

    def all_reduce_(self, flat: torch.Tensor) -> None:
        """Sum `flat` over the group, in place, on `flat`'s device."""
        if self.path is CollectivePath.NONE:
            return
        exchange = self._ipc(flat.device)
        if exchange is not None:
            exchange.all_reduce_(flat)
            return
        if self.path is CollectivePath.HOST and flat.device.type != "cpu":
            host = flat.to("cpu")
            dist.all_reduce(host, group=self.group)
            flat.copy_(host)
            return
        dist.all_reduce(flat, group=self.group)

    def all_gather_(self, padded: torch.Tensor, *, rank: int) -> None:
        """Fill `padded` (num_ranks equal chunks) from every rank's own chunk, in place; this
        rank's chunk must already hold its data."""
        if self.path is CollectivePath.NONE:
            return
        exchange = self._ipc(padded.device)
        if exchange is not None:
            exchange.all_gather_(padded, rank=rank)
            return
        size = padded.numel() // dist.get_world_size(self.group)
        mine = padded[rank * size : (rank + 1) * size]
        if self.path is CollectivePath.HOST and padded.device.type != "cpu":
            host = torch.empty(padded.numel(), dtype=padded.dtype)
            _gather_into(host, mine.to("cpu"), self.group)
            padded.copy_(host)
            return
        _gather_into(padded, mine, self.group)


def _gather_into(out: torch.Tensor, mine: torch.Tensor, group: dist.ProcessGroup | None) -> None:
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, mine, group=group)
