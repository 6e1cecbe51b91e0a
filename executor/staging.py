"""Bounded host staging: move tensors between processes through a fixed pool of host buffers.

A resize moves weights and optimizer state from the ranks that hold them to the ranks that will.
Going through disk is slow and taking a full host copy of the state can exhaust host memory, so
state streams chunk by chunk through a small ring of shared-memory buffers owned by the receiving
process (`StagingPool`): the sender copies chunk i+1 out of its device while the receiver copies
chunk i into its device (on CUDA each side's copies run on their own stream and are tracked with
events; the buffers are page-locked so both copies are DMA transfers). At no time does either
process hold more than `num_buffers * chunk_bytes` of staged bytes.

Flow control is a pair of named pipes (FIFOs) beside the shared-memory segment: the sender writes
"chunk i is ready" after the bytes are in the buffer; the receiver writes "slot free" after it has
copied them out. Both sides block in the kernel (no polling) and give up after `peer_timeout_s` with
a `StagingError` naming the transfer, so a dead peer cannot hang a resize forever.

Both sides derive the same chunk plan from the tensors' names, shapes and dtypes; the sender puts a
digest of that list in the segment's header and the receiver refuses a transfer whose layout differs
from its destination's, so bytes can never land in the wrong tensor.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import select
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from pydantic import BaseModel, ConfigDict, Field

_HEADER_BYTES = 4096
_DIGEST_BYTES = 32
_MESSAGE = struct.Struct("<qq")  # (transfer id, chunk index): 16 bytes, atomic on a pipe
MIB = 1 << 20
_SHM_DIR = "/dev/shm"


def _shm_dir(size: int) -> str:
    """/dev/shm (memory) when it has room; a container's small /dev/shm falls back to the temp
    folder, whose pages also stay in memory unless the host is short of it."""
    override = os.environ.get("DYNARESIZE_SHM_DIR")
    if override:
        return override
    try:
        stats = os.statvfs(_SHM_DIR)
        if stats.f_bavail * stats.f_frsize >= 2 * size:
            return _SHM_DIR
    except OSError:
        pass
    return tempfile.gettempdir()


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


# --------------------------------------------------------------------------------------------
# Chunk plan: which bytes of which tensor go where in which chunk.


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


def _byte_view(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """A flat uint8 view sharing the tensor's storage; refuses anything that would need a copy."""
    if not tensor.is_contiguous():
        raise StagingError(f"tensor {name!r} is not contiguous; staging it would need a full copy")
    return tensor.reshape(-1).view(torch.uint8)


# --------------------------------------------------------------------------------------------
# Copies: asynchronous with events on CUDA, plain memcpy on CPU.


class _Copier:
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


# --------------------------------------------------------------------------------------------
# The shared-memory ring and its two pipes.


@dataclass(frozen=True)
class TransferStats:
    """What one staged transfer moved and how long it took on this side."""

    num_bytes: int
    num_chunks: int
    seconds: float


def _fifo_paths(name: str) -> tuple[str, str]:
    base = os.path.join(tempfile.gettempdir(), name)
    return base + ".ready", base + ".free"


def _grant_path(pool_name: str, sender_id: int) -> str:
    return os.path.join(tempfile.gettempdir(), f"{pool_name}.grant.{sender_id}")


def _open_fifo(path: str) -> int:
    """Open (creating if needed) a FIFO read-write: never blocks, either side may come first."""
    with contextlib.suppress(FileExistsError):
        os.mkfifo(path, 0o600)
    return os.open(path, os.O_RDWR)


def _read_message(fd: int, *, timeout_s: float, what: str) -> tuple[int, int]:
    deadline = time.monotonic() + timeout_s
    data = b""
    while len(data) < _MESSAGE.size:
        left = deadline - time.monotonic()
        readable, _, _ = select.select([fd], [], [], max(left, 0.0))
        if not readable:
            raise StagingError(f"no {what} within {timeout_s} s")
        data += os.read(fd, _MESSAGE.size - len(data))
    return _MESSAGE.unpack(data)


class _Ring:
    """One mapping of a pool's segment and pipes, in the pool's owner or in a sender."""

    def __init__(self, name: str, config: StagingConfig, *, device: torch.device, create: bool):
        self.name = name
        self.config = config
        size = _HEADER_BYTES + config.budget_bytes
        # Plain POSIX shared memory under /dev/shm: the owner creates and unlinks it, a sender only
        # maps it (multiprocessing's SharedMemory would have every process's tracker claim it).
        if create:
            self._shm_path = os.path.join(_shm_dir(size), name)
        else:  # wherever the owner put it
            candidates = [os.path.join(d, name) for d in (_shm_dir(size), _SHM_DIR)]
            candidates.append(os.path.join(tempfile.gettempdir(), name))
            self._shm_path = next((c for c in candidates if os.path.exists(c)), candidates[0])
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(self._shm_path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        ready_path, free_path = _fifo_paths(name)
        if create:
            for path in (ready_path, free_path):
                if os.path.exists(path):
                    os.unlink(path)
                os.mkfifo(path, 0o600)
        # O_RDWR never blocks on open and keeps the pipe alive while either side is attached.
        self._ready_fd = os.open(ready_path, os.O_RDWR)
        self._free_fd = os.open(free_path, os.O_RDWR)
        self._whole = torch.frombuffer(self._map, dtype=torch.uint8)
        self._registered = False
        if device.type == "cuda" and config.pin_memory:
            code = torch.cuda.cudart().cudaHostRegister(self._whole.data_ptr(), size, 0)
            if int(code) != 0:
                raise StagingError(f"could not page-lock staging pool {name!r} (CUDA error {code})")
            self._registered = True
        self.header = self._whole[:_HEADER_BYTES]
        body = self._whole[_HEADER_BYTES:]
        chunk = config.chunk_bytes
        self.slots = [body[i * chunk : (i + 1) * chunk] for i in range(config.num_buffers)]

    # Messages ---------------------------------------------------------------------------------
    def _fd(self, fd_kind: str) -> int:
        return self._ready_fd if fd_kind == "ready" else self._free_fd

    def post(self, fd_kind: str, transfer_id: int, index: int) -> None:
        os.write(self._fd(fd_kind), _MESSAGE.pack(transfer_id, index))

    def expect(self, fd_kind: str, transfer_id: int, index: int) -> None:
        got = _read_message(
            self._fd(fd_kind),
            timeout_s=self.config.peer_timeout_s,
            what=f"'{fd_kind}' message for chunk {index} of transfer {transfer_id} "
            f"in staging pool {self.name!r}",
        )
        if got != (transfer_id, index):
            raise StagingError(
                f"staging pool {self.name!r}: expected '{fd_kind}' "
                f"({transfer_id}, {index}), got {got}"
            )

    def wait_until_read(self, fd_kind: str) -> None:
        """Block until the peer has read every message posted on `fd_kind`.

        Several senders share one pool's 'free' pipe, one after another: the next sender may
        start only once the previous one has taken its last 'free' messages, or it would read
        them as its own.
        """
        fd = self._fd(fd_kind)
        deadline = time.monotonic() + self.config.peer_timeout_s
        while select.select([fd], [], [], 0)[0]:
            if time.monotonic() > deadline:
                raise StagingError(
                    f"staging pool {self.name!r}: the last sender left its '{fd_kind}' "
                    f"messages unread for {self.config.peer_timeout_s:g} s"
                )
            time.sleep(1e-4)

    def drain(self) -> None:
        """Drop stale messages left by an aborted transfer."""
        for fd in (self._ready_fd, self._free_fd):
            while select.select([fd], [], [], 0)[0]:
                os.read(fd, 1 << 16)

    # Header -----------------------------------------------------------------------------------
    def write_header(self, transfer_id: int, digest: bytes, num_chunks: int) -> None:
        packed = struct.pack("<qq", transfer_id, num_chunks) + digest
        self.header[: len(packed)].copy_(torch.frombuffer(bytearray(packed), dtype=torch.uint8))

    def read_header(self) -> tuple[int, int, bytes]:
        raw = bytes(self.header[: 16 + _DIGEST_BYTES].numpy())
        transfer_id, num_chunks = struct.unpack("<qq", raw[:16])
        return transfer_id, num_chunks, raw[16:]

    def close(self, *, unlink: bool) -> None:
        if self._registered:
            torch.cuda.cudart().cudaHostUnregister(self._whole.data_ptr())
            self._registered = False
        self.slots = []
        del self.header
        del self._whole
        os.close(self._ready_fd)
        os.close(self._free_fd)
        with contextlib.suppress(BufferError):
            self._map.close()  # stray views keep it mapped until they are collected
        if unlink:
            for path in (self._shm_path, *_fifo_paths(self.name)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)


def _chunk_pairs(
    chunk: Chunk, views: list[torch.Tensor], slot: torch.Tensor, *, into_slot: bool
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    pairs = []
    for seg in chunk.segments:
        tensor_part = views[seg.tensor_index][seg.tensor_offset : seg.tensor_offset + seg.num_bytes]
        slot_part = slot[seg.buffer_offset : seg.buffer_offset + seg.num_bytes]
        pairs.append((slot_part, tensor_part) if into_slot else (tensor_part, slot_part))
    return pairs


_POOL_PREFIX = "dynaresize-stage-"


def _owner_alive(name: str) -> bool:
    try:
        pid = int(name[len(_POOL_PREFIX) :].split("-", 1)[0])
    except ValueError:
        return True  # not named by this module: leave it alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_pools() -> int:
    """Remove pools (and their pipes) whose owner process is gone, e.g. a killed worker actor,
    which never got to close its pool. Returns how many segments were removed."""
    removed = 0
    folders = {_SHM_DIR, tempfile.gettempdir()}
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for entry in names:
            if not entry.startswith(_POOL_PREFIX):
                continue
            pool = entry.split(".", 1)[0]
            if _owner_alive(pool):
                continue
            with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                os.unlink(os.path.join(folder, entry))
                removed += entry == pool
    return removed


class StagingPool:
    """A worker's inbound staging buffers: a fixed ring that senders stream chunks into.

    Created once per worker and kept for the whole run (the pool is the fixed host budget);
    `name` is what a sender needs to reach it. One transfer at a time.
    """

    def __init__(self, config: StagingConfig, *, device: torch.device, name: str | None = None):
        self.config = config
        self.device = device
        sweep_stale_pools()
        self.name = name or f"{_POOL_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._ring = _Ring(self.name, config, device=device, create=True)
        self._copier = _Copier(device)
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
        views = [_byte_view(t, name) for name, t in destination.items()]
        ring, num_slots = self._ring, self.config.num_buffers
        for index, chunk in enumerate(chunks):
            ring.expect("ready", transfer_id, index)
            if index == 0:
                self._check_header(transfer_id, layout_digest(specs), len(chunks))
            slot = ring.slots[index % num_slots]
            # While this chunk goes host-to-device, the sender fills the next free slot.
            _Copier.wait(self._copier.copy(_chunk_pairs(chunk, views, slot, into_slot=False)))
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
            self._grant_fds[sender_id] = _open_fifo(_grant_path(self.name, sender_id))
        os.write(self._grant_fds[sender_id], _MESSAGE.pack(transfer_id, -1))

    def reset(self) -> None:
        """Drop messages an aborted transfer left behind."""
        self._ring.drain()

    def close(self) -> None:
        for sender_id, fd in self._grant_fds.items():
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_grant_path(self.name, sender_id))
        self._grant_fds.clear()
        self._ring.close(unlink=True)


class StagingSender:
    """Streams tensors into other workers' pools; keeps each pool it reached attached, pinned."""

    def __init__(self, config: StagingConfig, *, device: torch.device):
        self.config = config
        self.device = device
        self._rings: dict[str, _Ring] = {}
        self._grant_fds: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def attach(self, pool_name: str) -> None:
        """Map (and pin) a peer's pool ahead of time, off the critical path of a resize."""
        self._ring_for(pool_name)

    def _ring_for(self, pool_name: str) -> _Ring:
        with self._lock:
            if pool_name not in self._rings:
                self._rings[pool_name] = _Ring(
                    pool_name, self.config, device=self.device, create=False
                )
            return self._rings[pool_name]

    def _await_grant(self, pool_name: str, sender_id: int, transfer_id: int) -> None:
        key = (pool_name, sender_id)
        with self._lock:
            if key not in self._grant_fds:
                self._grant_fds[key] = _open_fifo(_grant_path(pool_name, sender_id))
            fd = self._grant_fds[key]
        got = _read_message(
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
        copier = _Copier(self.device)
        specs = specs_of(tensors)
        chunks = plan_chunks(specs, self.config.chunk_bytes)
        views = [_byte_view(t, name) for name, t in tensors.items()]
        num_slots = self.config.num_buffers
        ring.write_header(transfer_id, layout_digest(specs), len(chunks))
        for index, chunk in enumerate(chunks):
            if index >= num_slots:
                ring.expect("free", transfer_id, index - num_slots)
            slot = ring.slots[index % num_slots]
            # While this chunk goes device-to-host, the receiver drains the previous one.
            _Copier.wait(copier.copy(_chunk_pairs(chunk, views, slot, into_slot=True)))
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
