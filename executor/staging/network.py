"""Point-to-point staged transfers over a process group: state between nodes, and GPU to GPU.

The shared-memory ring reaches only processes of one machine. When the sender and the receiver
of a slice sit on different nodes, or are two GPUs of one node that can copy device to device,
the slice goes over a dedicated process group with send/recv instead (gloo over host buffers on
CPU, NCCL on GPUs). The ring's contract holds here too:

- one chunk plan, one layout digest: the sender first sends a header (transfer id, chunk count,
  digest) and the receiver answers whether its destination has that layout before any byte of
  state moves, so a mismatch fails on both sides at once with a `StagingError`;
- bounded memory: at most `num_buffers` chunks of at most `chunk_bytes` are in flight per
  direction. A chunk that is one run of one tensor already on the wire's device is sent from, and
  received into, that tensor itself; any other is packed into (unpacked from) one of
  `num_buffers` buffers of `chunk_bytes`, allocated once per process and kept;
- the same `peer_timeout_s`: every wait gives up with a `StagingError` naming the transfer, and a
  peer that dies closes its connection, which fails the wait at once.

Header and answer always travel on a gloo group (its waits honour timeouts); the bytes travel on
the data wire: that same gloo group on CPU, an NCCL group for transfers between GPUs.
"""

from __future__ import annotations

import contextlib
import struct
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from .config import StagingConfig, StagingError
from .plan import Chunk, byte_view, layout_digest, plan_chunks, specs_of
from .transfer import TransferStats

HEADER = struct.Struct("<qq32s")  # transfer id, chunk count, layout digest
ACCEPTED, REFUSED = 1, 0


@dataclass(frozen=True)
class Wire:
    """Where a transfer's bytes travel: a process group of every worker (group rank = worker
    id) and the device its tensors must be on (CPU for gloo, the worker's GPU for NCCL)."""

    group: dist.ProcessGroup
    device: torch.device


class _Buffers:
    """`count` staging buffers of `chunk_bytes` on one device, allocated on first use."""

    def __init__(self, count: int, chunk_bytes: int, device: torch.device, pin: bool) -> None:
        self.count, self.chunk_bytes, self.device, self.pin = count, chunk_bytes, device, pin
        self._buffers: list[torch.Tensor | None] = [None] * count

    def slot(self, index: int, num_bytes: int) -> torch.Tensor:
        i = index % self.count
        if self._buffers[i] is None:
            pin = self.pin and self.device.type == "cpu" and torch.cuda.is_available()
            self._buffers[i] = torch.empty(
                self.chunk_bytes, dtype=torch.uint8, device=self.device, pin_memory=pin
            )
        buffer = self._buffers[i]
        assert buffer is not None
        return buffer[:num_bytes]

    @property
    def allocated_bytes(self) -> int:
        return sum(b.numel() for b in self._buffers if b is not None)


class PointToPoint:
    """One worker's end of point-to-point transfers on one wire: sends one at a time, receives
    one at a time (each direction holds at most `num_buffers` chunk buffers)."""

    def __init__(self, config: StagingConfig, *, control: dist.ProcessGroup, data: Wire) -> None:
        self.config = config
        self.control = control
        self.data = data
        self._send_buffers = _Buffers(
            config.num_buffers, config.chunk_bytes, data.device, config.pin_memory
        )
        self._receive_buffers = _Buffers(
            config.num_buffers, config.chunk_bytes, data.device, config.pin_memory
        )
        self._send_lock = threading.Lock()
        self._receive_lock = threading.Lock()
        # On a GPU wire each direction waits on its own stream: a wait on the caller's stream
        # would queue a receive behind this worker's unrelated sends (and those behind the
        # peers' receives), a cycle NCCL would hang in.
        cuda = data.device.type == "cuda"
        self._send_stream = torch.cuda.Stream(data.device) if cuda else None
        self._receive_stream = torch.cuda.Stream(data.device) if cuda else None

    @property
    def buffer_bytes(self) -> int:
        """Host or device bytes this end holds in staging buffers (the bound: 2 x budget)."""
        return self._send_buffers.allocated_bytes + self._receive_buffers.allocated_bytes

    # --- sending --------------------------------------------------------------------------

    def send(
        self, dst: int, tensors: Mapping[str, torch.Tensor], *, transfer_id: int
    ) -> TransferStats:
        """Stream `tensors` to worker `dst`, which receives them with `receive_into`."""
        with self._send_lock, self._on(self._send_stream):
            started = time.perf_counter()
            specs = specs_of(tensors)
            chunks = plan_chunks(specs, self.config.chunk_bytes)
            views = [byte_view(t, name) for name, t in tensors.items()]
            what = f"transfer {transfer_id} to worker {dst}"
            header = HEADER.pack(transfer_id, len(chunks), layout_digest(specs))
            self._wait(self._isend(_bytes_tensor(header), dst, transfer_id, control=True), what)
            answer = torch.empty(1, dtype=torch.uint8)
            self._wait(self._irecv(answer, dst, transfer_id, control=True), f"answer to {what}")
            if int(answer[0]) != ACCEPTED:
                raise StagingError(
                    f"{what}: the receiver's destination has a different layout "
                    f"({len(chunks)} chunks sent)"
                )
            in_flight: deque[dist.Work] = deque()
            for index, chunk in enumerate(chunks):
                if len(in_flight) == self.config.num_buffers:  # its buffer is the one reused
                    done = index - self.config.num_buffers
                    self._wait(in_flight.popleft(), f"{what}, chunk {done}")
                wire_bytes = self._outgoing(index, chunk, views)
                in_flight.append(self._isend(wire_bytes, dst, transfer_id))
            while in_flight:
                self._wait(in_flight.popleft(), f"{what}, last chunks")
            self._settle(self._send_stream)
            total = sum(c.num_bytes for c in chunks)
            return TransferStats(total, len(chunks), time.perf_counter() - started)

    def _outgoing(self, index: int, chunk: Chunk, views: list[torch.Tensor]) -> torch.Tensor:
        """The chunk's bytes on the wire's device: the tensor itself, or packed in a buffer."""
        direct = self._direct(chunk, views)
        if direct is not None:
            return direct
        buffer = self._send_buffers.slot(index, chunk.num_bytes)
        for seg in chunk.segments:
            source = views[seg.tensor_index][seg.tensor_offset : seg.tensor_offset + seg.num_bytes]
            buffer[seg.buffer_offset : seg.buffer_offset + seg.num_bytes].copy_(source)
        return buffer

    # --- receiving ------------------------------------------------------------------------

    def receive_into(
        self, src: int, destination: Mapping[str, torch.Tensor], *, transfer_id: int
    ) -> TransferStats:
        """Fill `destination` (allocated by the caller) from worker `src`'s `send`."""
        with self._receive_lock, self._on(self._receive_stream):
            started = time.perf_counter()
            specs = specs_of(destination)
            chunks = plan_chunks(specs, self.config.chunk_bytes)
            views = [byte_view(t, name) for name, t in destination.items()]
            what = f"transfer {transfer_id} from worker {src}"
            header = torch.empty(HEADER.size, dtype=torch.uint8)
            self._wait(self._irecv(header, src, transfer_id, control=True), f"header of {what}")
            got_id, got_chunks, got_digest = HEADER.unpack(bytes(header.numpy()))
            matches = (got_id, got_chunks, got_digest) == (
                transfer_id,
                len(chunks),
                layout_digest(specs),
            )
            answer = _bytes_tensor(bytes([ACCEPTED if matches else REFUSED]))
            self._wait(self._isend(answer, src, transfer_id, control=True), f"answer to {what}")
            if not matches:
                raise StagingError(
                    f"{what}: layout differs from the destination's (sender's transfer "
                    f"{got_id}, {got_chunks} chunks vs {len(chunks)})"
                )
            depth = self.config.num_buffers
            posted = {
                i: self._post(i, chunks[i], views, src, transfer_id)
                for i in range(min(depth, len(chunks)))
            }
            for index, chunk in enumerate(chunks):
                work, buffer = posted.pop(index)
                self._wait(work, f"{what}, chunk {index}")
                if buffer is not None:
                    for seg in chunk.segments:
                        end = seg.tensor_offset + seg.num_bytes
                        views[seg.tensor_index][seg.tensor_offset : end].copy_(
                            buffer[seg.buffer_offset : seg.buffer_offset + seg.num_bytes]
                        )
                if index + depth < len(chunks):  # into the buffer just emptied
                    posted[index + depth] = self._post(
                        index + depth, chunks[index + depth], views, src, transfer_id
                    )
            self._settle(self._receive_stream)
            total = sum(c.num_bytes for c in chunks)
            return TransferStats(total, len(chunks), time.perf_counter() - started)

    def _post(
        self, index: int, chunk: Chunk, views: list[torch.Tensor], src: int, transfer_id: int
    ) -> tuple[dist.Work, torch.Tensor | None]:
        """Post the receive of one chunk: into the destination itself, or into a buffer."""
        direct = self._direct(chunk, views)
        if direct is not None:
            return self._irecv(direct, src, transfer_id), None
        buffer = self._receive_buffers.slot(index, chunk.num_bytes)
        return self._irecv(buffer, src, transfer_id), buffer

    # --- the wire -------------------------------------------------------------------------

    def _direct(self, chunk: Chunk, views: list[torch.Tensor]) -> torch.Tensor | None:
        """The chunk as a view of its tensor, when it is one run of one tensor on the wire's
        device type (then nothing is copied on this side)."""
        if len(chunk.segments) != 1:
            return None
        seg = chunk.segments[0]
        view = views[seg.tensor_index]
        if view.device.type != self.data.device.type:
            return None
        return view[seg.tensor_offset : seg.tensor_offset + seg.num_bytes]

    def _isend(
        self, tensor: torch.Tensor, dst: int, tag: int, *, control: bool = False
    ) -> dist.Work:
        group = self.control if control else self.data.group
        work = dist.isend(tensor, dst=dst, group=group, tag=tag)
        assert work is not None, "this worker is a member of every transfer group"
        return work

    def _irecv(
        self, tensor: torch.Tensor, src: int, tag: int, *, control: bool = False
    ) -> dist.Work:
        group = self.control if control else self.data.group
        work = dist.irecv(tensor, src=src, group=group, tag=tag)
        assert work is not None, "this worker is a member of every transfer group"
        return work

    def _wait(self, work: dist.Work, what: str) -> None:
        timeout = timedelta(seconds=self.config.peer_timeout_s)
        try:
            done = work.wait(timeout=timeout)
        except RuntimeError as err:
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise StagingError(f"{what}: {reason}") from err
        if done is False:
            raise StagingError(f"{what}: no progress within {self.config.peer_timeout_s:g} s")

    @contextlib.contextmanager
    def _on(self, stream: torch.cuda.Stream | None) -> Iterator[None]:
        """Run one direction's copies and waits on its own stream (GPU wires), after what the
        caller's stream has queued (the tensors it just wrote)."""
        if stream is None:
            yield
            return
        stream.wait_stream(torch.cuda.current_stream(self.data.device))
        with torch.cuda.stream(stream):
            yield

    @staticmethod
    def _settle(stream: torch.cuda.Stream | None) -> None:
        """On a GPU wire, the transfer is done when its stream has run (for timing, and before
        the caller uses the tensors on any stream)."""
        if stream is not None:
            stream.synchronize()


def _bytes_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)
