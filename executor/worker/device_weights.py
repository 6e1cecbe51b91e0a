"""The weight sync from the first trainer to the replicas: device to device by CUDA IPC where a
replica can map the trainer's buffer, a host vector over the network for the others.

The publishing trainer keeps one flat buffer on its device (`DeviceWeightSync.publish`): each
weights version is copied into it from the model's parameters (device to device, the trainer
keeps them current after every update), the device's writes are waited for, and only then is a
small message sent over the sync group: the buffer's IPC handle (the same every version) and the
digest of what it holds. A replica maps the buffer once (`engines/device_share.py`) and its
engine loads straight from it; its own model is refreshed from it too, on the device, so that it
can become a trainer at any boundary. The sync ends with a barrier of the group, so the trainer
writes the next version only after every replica has read this one.

Per replica: whether a replica maps the buffer is decided the first time it sees it and kept
(`sync_paths.py` says when it is tried again); the members then tell each other their paths, and
in the same sync the trainer sends a host vector to the replicas that could not map the buffer
(`over_network`), the path every replica takes on CPU and across nodes.

The digest is `rl.weights_digest` over the buffer: a strided sample of it goes to the host, never
the whole model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from ..engines.device_share import (
    SharedDeviceTensor,
    fill_flat,
    finish_writes,
    open_shared,
    refusal,
    share,
)
from ..rl.weights_digest import weights_digest
from .sync_paths import MapOutcome, ReplicaPaths, SyncPath, SyncPlan

Load = Callable[[torch.Tensor], "str | None"]
"""A replica's load of the synced weights (a flat tensor) into its engine and model; returns the
digest its engine loaded."""


class DeviceWeightSync:
    """One worker's side of the weight sync on CUDA: the buffer it publishes as the first
    trainer, the buffers it mapped as a replica, and the path it decided for each."""

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None
        self._shared: SharedDeviceTensor | None = None
        self._opened: dict[str, torch.Tensor] = {}
        """Buffers of publishing trainers mapped here, by key (a new trainer adds one)."""
        self.paths = ReplicaPaths()
        """The path decided for each buffer this worker saw as a replica."""

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

    def path_to(self, shared: SharedDeviceTensor) -> MapOutcome:
        """This replica's path for the buffer `shared`: mapped on first sight (the mapping is
        kept), or refused and remembered as the network path."""
        return self.paths.decide(shared.key, lambda: self._try_map(shared))

    def _try_map(self, shared: SharedDeviceTensor) -> str | None:
        refused = refusal(shared)
        if refused is not None:
            return refused
        try:
            self._opened[shared.key] = open_shared(shared)
        except (RuntimeError, ValueError) as error:  # torch raises RuntimeError for CUDA errors
            return f"{type(error).__name__}: {error}"
        return None

    def receive(self, shared: SharedDeviceTensor) -> torch.Tensor:
        """The publishing trainer's buffer, as mapped by `path_to`."""
        tensor = self._opened.get(shared.key)
        if tensor is None:
            raise RuntimeError(f"device buffer {shared.key} was not mapped here")
        return tensor


def sync_on_device(
    sync: DeviceWeightSync,
    *,
    worker_id: int,
    model_parameters: Sequence[torch.Tensor],
    source: int,
    group: Any,
    load: Load,
) -> dict[str, Any]:
    """One weight sync across `group` (the first trainer `source` plus the replicas) with the
    models on CUDA: each replica by its own path, both paths in this one sync."""
    start = time.perf_counter()
    is_source = worker_id == source
    message: list[Any] = [sync.publish(model_parameters) if is_source else None]
    dist.broadcast_object_list(message, src=source, group=group)
    shared, sent_digest = message[0]
    mine = None if is_source else sync.path_to(shared).path
    members: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(members, (worker_id, mine), group=group)
    plan = SyncPlan.of(source, members)
    digest = sent_digest
    if mine is SyncPath.DEVICE:
        received = sync.receive(shared)
        digest = load(received)
        finish_writes(received)  # every read of the trainer's buffer is done on this side
    if plan.replicas_on(SyncPath.NETWORK):
        flat = over_network(
            model_parameters, worker_id=worker_id, source=source, plan=plan, group=group
        )
        if flat is not None and not is_source:
            digest = load(flat)
    dist.barrier(group=group)  # every replica has read this version: the next may be written
    element_bytes = torch.empty((), dtype=getattr(torch, shared.dtype)).element_size()
    return sync_result(
        worker_id=worker_id,
        plan=plan,
        nbytes=shared.numel * element_bytes,
        start_s=start,
        digest=digest,
    )


def over_network(
    model_parameters: Sequence[torch.Tensor],
    *,
    worker_id: int,
    source: int,
    plan: SyncPlan,
    group: Any,
) -> torch.Tensor | None:
    """The network path: the source sends its weights as one host vector to the replicas of
    `plan` on it, as raw bytes (any dtype crosses gloo unchanged); one broadcast when every
    replica is on it, else one send per such replica. The host vector on the source and on those
    replicas, None on the others (which take no part)."""
    receivers = plan.replicas_on(SyncPath.NETWORK)
    is_source = worker_id == source
    if not is_source and worker_id not in receivers:
        return None
    first = model_parameters[0]
    if is_source:
        flat = torch.cat([p.detach().reshape(-1) for p in model_parameters]).cpu()
    else:
        flat = torch.empty(sum(p.numel() for p in model_parameters), dtype=first.dtype)
    payload = flat.view(torch.uint8)
    if plan.all_network:
        dist.broadcast(payload, src=source, group=group)
    elif is_source:
        sends = [dist.isend(payload, dst=w, group=group) for w in receivers]
        for work in sends:
            assert work is not None  # the source is a member of the sync group
            work.wait()
    else:
        dist.recv(payload, src=source, group=group)
    return flat


def sync_result(
    *, worker_id: int, plan: SyncPlan, nbytes: int, start_s: float, digest: str | None
) -> dict[str, Any]:
    """What a member reports of one sync: bytes, seconds, the digest (the source: of what it
    sent; a replica: of what its engine loaded) and, on a replica, its path (the driver counts
    them, `sync_paths.count_paths`)."""
    result: dict[str, Any] = {
        "bytes": nbytes,
        "s": time.perf_counter() - start_s,
        "digest": digest,
        "source": worker_id == plan.source,
    }
    if worker_id != plan.source:
        result["path"] = plan.paths[worker_id].value
    return result
