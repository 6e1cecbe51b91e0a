"""Device-to-device transfers: the NCCL wire between GPUs, of one node or across nodes.

Where both workers of a move have a GPU of their own, a slice need not go through host memory:
the NCCL wire sends it from one GPU to the other (over NVLink or PCIe peer to peer inside a
node, over the network between nodes), chunked and checked exactly like every other path
(`network.PointToPoint`; its header and answer still travel on gloo). NCCL cannot join two ranks
on one GPU, so the wire exists only when every worker has its own (`LiveConfig.device_transfers`).
NVLink multicast (NVLS) stays off: the GPU machines this runs on require it.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from .config import StagingError
from .network import Wire

NCCL_ENV = {"NCCL_NVLS_ENABLE": "0"}
"""Set in every process that creates the NCCL wire, before NCCL starts."""


def nccl_wire(*, world_size: int, device: torch.device, timeout_s: float) -> Wire:
    """An NCCL group of every worker (every worker must call this, in the same order as its
    other groups). Its communicators start on first use: torch gives each pair of workers that
    exchange point to point a communicator and stream of its own, so sends to one peer never
    queue behind transfers with another."""
    if device.type != "cuda":
        raise StagingError(f"device-to-device transfers need a CUDA device, not {device}")
    if not dist.is_nccl_available():
        raise StagingError("device-to-device transfers need torch built with NCCL")
    os.environ.update(NCCL_ENV)
    torch.cuda.set_device(device)  # the pair communicators are made on the current device
    group = dist.new_group(
        list(range(world_size)), backend="nccl", timeout=timedelta(seconds=timeout_s)
    )
    if group is None:
        raise StagingError("the NCCL transfer group could not be created")
    return Wire(group=group, device=device)
