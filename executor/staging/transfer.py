"""Staged transfers: a pool receives into a worker's tensors, a sender streams out of another's.

The copies of one chunk run asynchronously with events on CUDA (each side on its own stream, so
the sender fills chunk i+1 while the receiver drains chunk i) and as plain copies on CPU.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from .config import StagingConfig, StagingError
from .plan import Chunk, byte_view, layout_digest, plan_chunks, specs_of
from .ring import (
    MESSAGE,
    POOL_PREFIX,
    SharedRing,
    grant_path,
    open_fifo,
    read_message,
    sweep_stale_pools,
)


class Copier:
    """Issues the byte copies of one chunk and says when they have landed."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device=device) if self.cuda else None

    def copy(self, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.cuda.Event | None:
        if not self.cuda:
            for dst, src in pairs:
                dst.copy_(src)
            return None
        assert self.stream is not None
        # Copies read tensors the default stream may have just written.
        self.stream.wait_stream(torch.cuda.current_stream(self.stream.device))
        with torch.cuda.stream(self.stream):
            for dst, src in pairs:
                dst.copy_(src, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        return event

    @staticmethod
    def wait(event: torch.cuda.Event | None) -> None:
        if event is not None:
            event.synchronize()

    def finish(self) -> None:
        """Make the default stream wait for what this copier wrote (the receiver's tensors)."""
        if self.cuda and self.stream is not None:
            torch.cuda.current_stream(self.stream.device).wait_stream(self.stream)


@dataclass(frozen=True)
class TransferStats:
    """What one staged transfer moved and how long it took on this side."""

    num_bytes: int
    num_chunks: int
    seconds: float


def _chunk_pairs(
    chunk: Chunk, views: list[torch.Tensor], slot: torch.Tensor, *, into_slot: bool
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    pairs = []
    for seg in chunk.segments:
        tensor_part = views[seg.tensor_index][seg.tensor_offset : seg.tensor_offset + seg.num_bytes]
        slot_part = slot[seg.buffer_offset : seg.buffer_offset + seg.num_bytes]
        pairs.append((slot_part, tensor_part) if into_slot else (tensor_part, slot_part))
    return pairs


class StagingPool:
    """A worker's inbound staging buffers: a fixed ring that senders stream chunks into.

    Created once per worker and kept for the whole run (the pool is the fixed host budget);
    `name` is what a sender needs to reach it. One transfer at a time.
    """

    def __init__(self, config: StagingConfig, *, device: torch.device, name: str | None = None):
        self.config = config
        self.device = device
        sweep_stale_pools()
        self.name = name or f"{POOL_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._ring = SharedRing(self.name, config, device=device, create=True)
        self._copier = Copier(device)
        self._grant_fds: dict[int, int] = {}

    def receive_into(
        self,
        destination: Mapping[str, torch.Tensor],
        *,
        transfer_id: int,
        sender_id: int | None = None,
    ) -> TransferStats:
        """Fill `destination` (allocated by the caller, on its device) from one sender's stream.

        With `sender_id`, the pool first grants that sender its turn: several senders may then
        wait on one pool at once and each writes only when the receiver asks for its transfer.
        """
        started = time.perf_counter()
        if sender_id is not None:
            self._ring.wait_until_read("free")
            self._grant(sender_id, transfer_id)
        specs = specs_of(destination)
        chunks = plan_chunks(specs, self.config.chunk_bytes)
        views = [byte_view(t, name) for name, t in destination.items()]
        ring, num_slots = self._ring, self.config.num_buffers
        for index, chunk in enumerate(chunks):
            ring.expect("ready", transfer_id, index)
            if index == 0:
                self._check_header(transfer_id, layout_digest(specs), len(chunks))
            slot = ring.slots[index % num_slots]
            # While this chunk goes host-to-device, the sender fills the next free slot.
            Copier.wait(self._copier.copy(_chunk_pairs(chunk, views, slot, into_slot=False)))
            ring.post("free", transfer_id, index)
        self._copier.finish()
        total = sum(c.num_bytes for c in chunks)
        return TransferStats(total, len(chunks), time.perf_counter() - started)

    def _check_header(self, transfer_id: int, digest: bytes, num_chunks: int) -> None:
        got_id, got_chunks, got_digest = self._ring.read_header()
        if got_id != transfer_id or got_digest != digest or got_chunks != num_chunks:
            raise StagingError(
                f"staging pool {self.name!r}: transfer {transfer_id} layout differs from the "
                f"destination's (sender's transfer {got_id}, {got_chunks} chunks vs {num_chunks})"
            )

    def _grant(self, sender_id: int, transfer_id: int) -> None:
        if sender_id not in self._grant_fds:
            self._grant_fds[sender_id] = open_fifo(grant_path(self.name, sender_id))
        os.write(self._grant_fds[sender_id], MESSAGE.pack(transfer_id, -1))

    def reset(self) -> None:
        """Drop messages an aborted transfer left behind."""
        self._ring.drain()

    def close(self) -> None:
        for sender_id, fd in self._grant_fds.items():
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(grant_path(self.name, sender_id))
        self._grant_fds.clear()
        self._ring.close(unlink=True)


class StagingSender:
    """Streams tensors into other workers' pools; keeps each pool it reached attached, pinned."""

    def __init__(self, config: StagingConfig, *, device: torch.device):
        self.config = config
        self.device = device
        self._rings: dict[str, SharedRing] = {}
        self._grant_fds: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def attach(self, pool_name: str) -> None:
        """Map (and pin) a peer's pool ahead of time, off the critical path of a resize."""
        self._ring_for(pool_name)

    def _ring_for(self, pool_name: str) -> SharedRing:
        with self._lock:
            if pool_name not in self._rings:
                self._rings[pool_name] = SharedRing(
                    pool_name, self.config, device=self.device, create=False
                )
            return self._rings[pool_name]

    def _await_grant(self, pool_name: str, sender_id: int, transfer_id: int) -> None:
        key = (pool_name, sender_id)
        with self._lock:
            if key not in self._grant_fds:
                self._grant_fds[key] = open_fifo(grant_path(pool_name, sender_id))
            fd = self._grant_fds[key]
        got = read_message(
            fd,
            timeout_s=self.config.peer_timeout_s,
            what=f"grant of transfer {transfer_id} from staging pool {pool_name!r}",
        )
        if got != (transfer_id, -1):
            raise StagingError(f"staging pool {pool_name!r} granted {got}, not ({transfer_id}, -1)")

    def send(
        self,
        pool_name: str,
        tensors: Mapping[str, torch.Tensor],
        *,
        transfer_id: int,
        sender_id: int | None = None,
    ) -> TransferStats:
        """Stream `tensors` into pool `pool_name`; returns once the receiver freed every slot.

        With `sender_id`, waits for the receiver's grant of this transfer before writing. Sends to
        different pools may run in parallel threads; each thread gets its own copy stream.
        """
        started = time.perf_counter()
        ring = self._ring_for(pool_name)
        if sender_id is not None:
            self._await_grant(pool_name, sender_id, transfer_id)
        copier = Copier(self.device)
        specs = specs_of(tensors)
        chunks = plan_chunks(specs, self.config.chunk_bytes)
        views = [byte_view(t, name) for name, t in tensors.items()]
        num_slots = self.config.num_buffers
        ring.write_header(transfer_id, layout_digest(specs), len(chunks))
        for index, chunk in enumerate(chunks):
            if index >= num_slots:
                ring.expect("free", transfer_id, index - num_slots)
            slot = ring.slots[index % num_slots]
            # While this chunk goes device-to-host, the receiver drains the previous one.
            Copier.wait(copier.copy(_chunk_pairs(chunk, views, slot, into_slot=True)))
            ring.post("ready", transfer_id, index)
        # The slots still held by the receiver: wait until it has copied them out.
        for index in range(max(len(chunks) - num_slots, 0), len(chunks)):
            ring.expect("free", transfer_id, index)
        total = sum(c.num_bytes for c in chunks)
        return TransferStats(total, len(chunks), time.perf_counter() - started)

    def close(self) -> None:
        for ring in self._rings.values():
            ring.close(unlink=False)
        self._rings.clear()
        for fd in self._grant_fds.values():
            os.close(fd)
        self._grant_fds.clear()
