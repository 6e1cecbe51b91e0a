"""One CUDA buffer mapped by several processes of a node: weights that never leave the device.

A process that owns a flat weight buffer on a GPU shares it once (`share`): torch's CUDA IPC
handle for its memory, plus the device's UUID and the node it lives on. Another process of the
same node opens it (`open_shared`) and gets a tensor over the very same memory, with no copy;
the owner then refreshes the buffer in place for every new weights version. Used between a live
worker and its engine process, and from the trainer that publishes the weights to the replicas
on its node (`worker/device_weights.py`).

Ordering is the caller's: the producer finishes its writes (`finish_writes`, a stream
synchronisation) before it tells a consumer that the buffer holds a new version, and writes the
next version only after every consumer said it is done reading. Torch's own IPC event covers
only the first opening.

Device numbers differ between processes (Ray gives each worker its own CUDA_VISIBLE_DEVICES), so
the handle names the device by UUID and `open_shared` finds its local number; a process that
does not see that device, or runs on another node, cannot open it (`refusal` says why) and gets
the weights by the network path instead, decided per replica (`worker/sync_paths.py`).

Everything here but `share`, `open_shared` and `finish_writes` runs on CPU tensors too; those
three need CUDA (torch has no IPC for host tensors in this form).
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class SharedDeviceTensor:
    """What a process needs to map a flat CUDA buffer of another process; pickles small."""

    rebuild_args: tuple[Any, ...]
    """The arguments of torch's `rebuild_cuda_tensor` (its IPC handle), as the owner made them."""
    device_uuid: str
    node: str
    numel: int
    dtype: str
    """A torch dtype name without the `torch.` prefix."""

    @property
    def key(self) -> str:
        """Names the buffer among others (its IPC handle is unique while the owner lives)."""
        handle = self.rebuild_args[_HANDLE]
        digest = handle.hex() if isinstance(handle, bytes) else str(handle)
        return f"cuda-ipc:{self.device_uuid}:{digest[:32]}:{self.numel}"


_DEVICE = 6
"""Index of the device number in `rebuild_cuda_tensor`'s arguments."""
_HANDLE = 7
"""Index of the storage's IPC handle there."""


@functools.cache
def node_identity() -> str:
    """This machine: its host name and the kernel's boot id (two containers on one host name
    are told apart by the boot id only when they are different machines)."""
    boot = Path("/proc/sys/kernel/random/boot_id")
    boot_id = boot.read_text().strip() if boot.is_file() else ""
    return f"{socket.gethostname()}/{boot_id}"


def device_uuid(index: int) -> str:
    return str(torch.cuda.get_device_properties(index).uuid)


def local_index(uuid: str) -> int | None:
    """This process's number for the device with `uuid`, or None when it does not see it."""
    if not torch.cuda.is_available():
        return None
    for index in range(torch.cuda.device_count()):
        if device_uuid(index) == uuid:
            return index
    return None


def share(tensor: torch.Tensor) -> SharedDeviceTensor:
    """The handle of a flat CUDA tensor that owns its whole storage."""
    from torch.multiprocessing.reductions import reduce_tensor

    if not tensor.is_cuda or tensor.ndim != 1 or tensor.storage_offset() != 0:
        raise ValueError("share takes a flat CUDA tensor at the start of its storage")
    _rebuild, args = reduce_tensor(tensor)
    return SharedDeviceTensor(
        rebuild_args=tuple(args),
        device_uuid=device_uuid(tensor.device.index or 0),
        node=node_identity(),
        numel=tensor.numel(),
        dtype=str(tensor.dtype).removeprefix("torch."),
    )


def refusal(shared: SharedDeviceTensor) -> str | None:
    """Why this process cannot open `shared` (another node, its device not visible here), or
    None when it can try."""
    if shared.node != node_identity():
        return f"device buffer of node {shared.node} opened on {node_identity()}"
    if local_index(shared.device_uuid) is None:
        return f"device {shared.device_uuid} is not visible in this process"
    return None


def can_open(shared: SharedDeviceTensor) -> bool:
    """This process runs on the buffer's node and sees its device."""
    return refusal(shared) is None


def open_shared(shared: SharedDeviceTensor) -> torch.Tensor:
    """A tensor over the owner's buffer, on this process's number for the owner's device."""
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    refused = refusal(shared)
    index = local_index(shared.device_uuid)
    if refused is not None or index is None:
        raise ValueError(refused or f"device {shared.device_uuid} is not visible")
    args = list(shared.rebuild_args)
    args[_DEVICE] = index
    tensor = rebuild_cuda_tensor(*args)
    if tensor.numel() != shared.numel:
        raise ValueError(f"shared device buffer has {tensor.numel()} elements, not {shared.numel}")
    return tensor


def finish_writes(tensor: torch.Tensor) -> None:
    """Wait until every write queued on `tensor`'s device is done, so that another process may
    read it (its streams do not order after ours). Nothing to wait for on the host."""
    if tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)


def fill_flat(buffer: torch.Tensor, parameters: Sequence[torch.Tensor]) -> torch.Tensor:
    """Copy `parameters` (flattened, in order) into the flat `buffer` in place, on the device
    they and the buffer are on: no host copy, no second buffer."""
    total = sum(p.numel() for p in parameters)
    if buffer.ndim != 1 or buffer.numel() != total:
        raise ValueError(f"buffer has shape {tuple(buffer.shape)}, parameters hold {total}")
    with torch.no_grad():
        torch.cat([p.detach().reshape(-1) for p in parameters], out=buffer)
    return buffer
