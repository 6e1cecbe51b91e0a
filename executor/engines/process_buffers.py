"""Weights between a live worker and its engine process: a device buffer (CUDA) or a file in
shared memory.

On CUDA the buffer is a flat tensor on the worker's device, mapped by the engine process through
its IPC handle (`device_buffer`, `device_share.py`): weights go from the worker's model to the
engine's parameters without leaving the device, and the buffer outlives engine processes (a new
one maps it again). Elsewhere:

The file (in `/dev/shm`) is named after the engine (the run and the worker) and the process that
made it, sized once, mapped on both sides as soon as it is made, and its name removed then: it
lives for one round trip. The engine process also removes it on every other path (a failed
start, `close`, garbage collection, interpreter exit), and a new engine process removes the
files of parents that no longer exist (killed within that round trip: `remove_stale_buffers`);
nothing else in the folder is touched. `flat_view` lays a flat tensor or a state dict out as the
one flat tensor the buffer holds.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from dataclasses import dataclass
from itertools import count
from pathlib import Path

import torch

from .device_share import SharedDeviceTensor, share
from .interface import Weights
from .process_child import WeightsMessage

DEFAULT_SHM_DIR = Path("/dev/shm")
BUFFER_PREFIX = "dynaresize-engine-"
BUFFER_SUFFIX = ".weights"
_BUFFER_NAME = re.compile(rf"^{BUFFER_PREFIX}.*-p(\d+)-\d+{re.escape(BUFFER_SUFFIX)}$")
_buffer_numbers = count()

Layout = tuple[tuple[str, tuple[int, ...]], ...]
"""(name, shape) of each tensor of a state dict laid out flat."""


@dataclass
class WeightBuffer:
    path: Path
    """The shared-memory file (its name is removed once mapped), or a device buffer's key."""
    numel: int
    dtype: torch.dtype
    tensor: torch.Tensor
    device: SharedDeviceTensor | None = None
    """Set for a CUDA buffer: the handle the engine process maps it by."""

    def message(self, names_shapes: Layout | None) -> WeightsMessage:
        return WeightsMessage(
            path=str(self.path),
            numel=self.numel,
            dtype=str(self.dtype).removeprefix("torch."),
            names_shapes=names_shapes,
            device=self.device,
        )


def device_buffer(numel: int, dtype: torch.dtype, device: torch.device) -> WeightBuffer:
    """A flat buffer on a CUDA device, shared by handle with the engine process."""
    tensor = torch.empty(numel, dtype=dtype, device=device)
    shared = share(tensor)
    return WeightBuffer(Path(shared.key), numel, dtype, tensor, shared)


def buffer_path(shm_dir: Path, engine_name: str) -> Path:
    """A new buffer's file name in `shm_dir`, unique to this process."""
    number = next(_buffer_numbers)
    return shm_dir / f"{BUFFER_PREFIX}{engine_name}-p{os.getpid()}-{number}{BUFFER_SUFFIX}"


def reserve_file(path: Path, nbytes: int) -> None:
    """Create `path` (owner only, never over an existing file) and reserve its pages now, so
    that a full /dev/shm is an OSError here, not a SIGBUS later; nothing is left on failure."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(fd, 0, max(nbytes, 1))
    except OSError:
        remove_path(path)
        raise
    finally:
        os.close(fd)


def flat_view(weights: Weights) -> tuple[torch.Tensor, Layout | None]:
    """One flat tensor to copy, and the (name, shape) layout when `weights` is a state dict."""
    if isinstance(weights, torch.Tensor):
        if weights.ndim != 1:
            raise ValueError(f"flat weights must be 1-D, got shape {tuple(weights.shape)}")
        return weights.detach(), None
    dtypes = {tensor.dtype for tensor in weights.values()}
    if len(dtypes) != 1:
        raise ValueError(f"a state dict for the engine process needs one dtype, got {dtypes}")
    devices = {tensor.device for tensor in weights.values()}
    if len(devices) != 1:
        raise ValueError(f"a state dict for the engine process needs one device, got {devices}")
    layout = tuple((name, tuple(tensor.shape)) for name, tensor in weights.items())
    flat = torch.cat([tensor.detach().reshape(-1) for tensor in weights.values()])
    return flat, layout


def remove_path(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        path.unlink()


def remove_stale_buffers(shm_dir: Path = DEFAULT_SHM_DIR) -> int:
    """Remove weight buffers whose owning process is gone (a parent killed between creating one
    and its child mapping it); only this module's names are touched. Returns how many."""
    removed = 0
    for path in shm_dir.glob(f"{BUFFER_PREFIX}*{BUFFER_SUFFIX}"):
        match = _BUFFER_NAME.match(path.name)
        if match is None or _process_exists(int(match.group(1))):
            continue
        remove_path(path)
        removed += 1
    return removed


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True
