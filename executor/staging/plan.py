"""The chunk plan: which bytes of which tensor go where in which chunk of a staging buffer.

Both sides of a transfer derive the same plan from the tensors' names, shapes and dtypes; the
digest of that list is what the receiver checks before it copies a byte.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from .config import StagingError


@dataclass(frozen=True)
class TensorSpec:
    """What both sides must agree on about one tensor: its name, shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def num_bytes(self) -> int:
        numel = 1
        for size in self.shape:
            numel *= size
        return numel * torch.empty((), dtype=self.dtype).element_size()

    @classmethod
    def of(cls, name: str, tensor: torch.Tensor) -> TensorSpec:
        return cls(name=name, shape=tuple(tensor.shape), dtype=tensor.dtype)


@dataclass(frozen=True)
class Segment:
    """A run of bytes of one tensor placed at an offset of one chunk's buffer."""

    tensor_index: int
    tensor_offset: int
    buffer_offset: int
    num_bytes: int


@dataclass(frozen=True)
class Chunk:
    segments: tuple[Segment, ...]

    @property
    def num_bytes(self) -> int:
        return sum(s.num_bytes for s in self.segments)


def specs_of(tensors: Mapping[str, torch.Tensor]) -> list[TensorSpec]:
    return [TensorSpec.of(name, t) for name, t in tensors.items()]


def layout_digest(specs: list[TensorSpec]) -> bytes:
    """A digest of names, shapes and dtypes in order: equal digests mean equal chunk plans."""
    text = ";".join(f"{s.name}|{s.shape}|{s.dtype}" for s in specs)
    return hashlib.sha256(text.encode()).digest()


def plan_chunks(specs: list[TensorSpec], chunk_bytes: int) -> list[Chunk]:
    """Pack the tensors' bytes, in order, into chunks of at most `chunk_bytes`.

    Small tensors share a chunk; a large one is split across consecutive chunks. Every byte of
    every tensor appears in exactly one segment (a property test checks it).
    """
    if chunk_bytes < 1:
        raise ValueError("chunk_bytes must be positive")
    chunks: list[Chunk] = []
    current: list[Segment] = []
    used = 0
    for index, spec in enumerate(specs):
        offset = 0
        remaining = spec.num_bytes
        while remaining > 0:
            take = min(remaining, chunk_bytes - used)
            current.append(Segment(index, offset, used, take))
            offset += take
            used += take
            remaining -= take
            if used == chunk_bytes:
                chunks.append(Chunk(tuple(current)))
                current, used = [], 0
    if current:
        chunks.append(Chunk(tuple(current)))
    return chunks


def byte_view(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """A flat uint8 view sharing the tensor's storage; refuses anything that would need a copy."""
    if not tensor.is_contiguous():
        raise StagingError(f"tensor {name!r} is not contiguous; staging it would need a full copy")
    return tensor.reshape(-1).view(torch.uint8)
