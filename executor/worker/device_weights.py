"""The weight sync on one node with CUDA: the first trainer's weights reach the replicas by CUDA
IPC, never through host memory.

The publishing trainer keeps one flat buffer on its device (`DeviceWeightSync.publish`): each
weights version is copied into it from the model's parameters (device to device, the trainer
keeps them current after every update), the device's writes are waited for, and only then is a
small message sent over the sync group: the buffer's IPC handle (the same every version, opened
once per replica) and the digest of what it holds. A replica maps the buffer
(`receive`, `engines/device_share.py`) and its engine loads straight from it; its own model is
refreshed from it too, on the device, so that it can become a trainer at any boundary. The
sync ends with a barrier of the group, so the trainer writes the next version only after every
replica has read this one.

All or nothing: the replicas first say whether they can map the buffer (same node, the
trainer's device visible to them); if one cannot, this sync takes the network path (a host
vector broadcast over the group) for everyone, as across nodes.

The digest is `rl.weights_digest` over the buffer: a strided sample of it goes to the host, never
the whole model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from ..engines.device_share import (
    SharedDeviceTensor,
    can_open,
    fill_flat,
    finish_writes,
    open_shared,
    share,
)
from ..rl.weights_digest import weights_digest

PATH_NAME = "cuda_ipc"
"""The path the sync result names when the weights moved device to device."""


class DeviceWeightSync:
    """One worker's side of the device-to-device weight sync."""

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None
        self._shared: SharedDeviceTensor | None = None
        self._opened: dict[str, torch.Tensor] = {}
        """Buffers of publishing trainers mapped here, by key (a new trainer adds one)."""

    def publish(self, parameters: Sequence[torch.Tensor]) -> tuple[SharedDeviceTensor, str]:
        """Copy `parameters` into the published buffer (made and shared once) and wait for the
        device; the handle and the digest of what the buffer now holds."""
        first = parameters[0]
        numel = sum(p.numel() for p in parameters)
        if self._buffer is None or self._buffer.numel() != numel:
            self._buffer = torch.empty(numel, dtype=first.dtype, device=first.device)
            self._shared = share(self._buffer)
        assert self._shared is not None
        fill_flat(self._buffer, parameters)
        finish_writes(self._buffer)
        return self._shared, weights_digest(self._buffer)

    def receive(self, shared: SharedDeviceTensor) -> torch.Tensor:
        """The publishing trainer's buffer, mapped here once."""
        tensor = self._opened.get(shared.key)
        if tensor is None:
            tensor = self._opened[shared.key] = open_shared(shared)
        return tensor


def sync_on_device(
    sync: DeviceWeightSync,
    *,
    model_parameters: Sequence[torch.Tensor],
    is_source: bool,
    source: int,
    group: Any,
    load: Any,
) -> dict[str, Any] | None:
    """One weight sync by CUDA IPC across `group` (source plus replicas), or None when some
    member cannot map the source's buffer (the caller then takes the network path; every
    member returns None alike). `load(flat)` runs on a replica with the mapped buffer and
    returns the digest its engine loaded."""
    start = time.perf_counter()
    message: list[Any] = [sync.publish(model_parameters) if is_source else None]
    dist.broadcast_object_list(message, src=source, group=group)
    shared, sent_digest = message[0]
    able = torch.tensor([1 if is_source or can_open(shared) else 0], dtype=torch.int32)
    dist.all_reduce(able, op=dist.ReduceOp.MIN, group=group)
    if int(able.item()) == 0:
        return None
    digest = sent_digest
    if not is_source:
        received = sync.receive(shared)
        digest = load(received)
        finish_writes(received)  # every read of the trainer's buffer is done on this side
    dist.barrier(group=group)  # every replica has read this version: the next may be written
    element_bytes = torch.empty((), dtype=getattr(torch, shared.dtype)).element_size()
    return {
        "bytes": shared.numel * element_bytes,
        "s": time.perf_counter() - start,
        "digest": digest,
        "source": is_source,
        "path": PATH_NAME,
    }
