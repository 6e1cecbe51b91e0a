"""The staging pool's size and peer timeout, and the error a transfer raises."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MIB = 1 << 20


class StagingError(RuntimeError):
    """A staged transfer could not complete (peer gone, layout mismatch, bad message)."""


class StagingConfig(BaseModel):
    """Size of the host staging pool and how long to wait for a peer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chunk_bytes: int = Field(
        default=256 * MIB, ge=4096, description="Bytes in one host staging buffer (one chunk)."
    )
    num_buffers: int = Field(
        default=2,
        ge=1,
        description="Buffers in the pool; two or more let the sender fill one while the "
        "receiver drains another.",
    )
    pin_memory: bool = Field(
        default=True, description="Page-lock the buffers when a CUDA device is present."
    )
    peer_timeout_s: float = Field(
        default=300.0, gt=0, description="Longest wait for the other side of a transfer (s)."
    )

    @property
    def budget_bytes(self) -> int:
        """Host bytes the pool holds: the bound on staged state per process."""
        return self.chunk_bytes * self.num_buffers
