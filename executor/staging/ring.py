"""The shared-memory ring a pool owns and a sender maps, and the pipes that pace it.

A pool's segment lives under /dev/shm (or the temp folder when /dev/shm is small); beside it two
named pipes (FIFOs) carry "chunk ready" and "slot free" messages, each a (transfer id, chunk
index) pair that is written atomically. `sweep_stale_pools` removes what a killed worker left.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import select
import struct
import tempfile
import time

import torch

from .config import StagingConfig, StagingError

HEADER_BYTES = 4096
DIGEST_BYTES = 32
MESSAGE = struct.Struct("<qq")  # (transfer id, chunk index): 16 bytes, atomic on a pipe
_SHM_DIR = "/dev/shm"
POOL_PREFIX = "dynaresize-stage-"


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


def fifo_paths(name: str) -> tuple[str, str]:
    base = os.path.join(tempfile.gettempdir(), name)
    return base + ".ready", base + ".free"


def grant_path(pool_name: str, sender_id: int) -> str:
    return os.path.join(tempfile.gettempdir(), f"{pool_name}.grant.{sender_id}")


def open_fifo(path: str) -> int:
    """Open (creating if needed) a FIFO read-write: never blocks, either side may come first."""
    with contextlib.suppress(FileExistsError):
        os.mkfifo(path, 0o600)
    return os.open(path, os.O_RDWR)


def read_message(fd: int, *, timeout_s: float, what: str) -> tuple[int, int]:
    deadline = time.monotonic() + timeout_s
    data = b""
    while len(data) < MESSAGE.size:
        left = deadline - time.monotonic()
        readable, _, _ = select.select([fd], [], [], max(left, 0.0))
        if not readable:
            raise StagingError(f"no {what} within {timeout_s} s")
        data += os.read(fd, MESSAGE.size - len(data))
    return MESSAGE.unpack(data)


class SharedRing:
    """One mapping of a pool's segment and pipes, in the pool's owner or in a sender."""

    def __init__(self, name: str, config: StagingConfig, *, device: torch.device, create: bool):
        self.name = name
        self.config = config
        size = HEADER_BYTES + config.budget_bytes
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
        ready_path, free_path = fifo_paths(name)
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
        self.header = self._whole[:HEADER_BYTES]
        body = self._whole[HEADER_BYTES:]
        chunk = config.chunk_bytes
        self.slots = [body[i * chunk : (i + 1) * chunk] for i in range(config.num_buffers)]

    # Messages ---------------------------------------------------------------------------------
    def _fd(self, fd_kind: str) -> int:
        return self._ready_fd if fd_kind == "ready" else self._free_fd

    def post(self, fd_kind: str, transfer_id: int, index: int) -> None:
        os.write(self._fd(fd_kind), MESSAGE.pack(transfer_id, index))

    def expect(self, fd_kind: str, transfer_id: int, index: int) -> None:
        got = read_message(
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
        """Wait until the peer has read every message posted on `fd_kind`. This one polls: a
        pipe has no event for "drained", so it checks every 0.1 ms whether bytes are still
        unread (up to `peer_timeout_s`); it runs once per transfer, after the last chunk.

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
        raw = bytes(self.header[: 16 + DIGEST_BYTES].numpy())
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
            for path in (self._shm_path, *fifo_paths(self.name)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)


def _owner_alive(name: str) -> bool:
    try:
        pid = int(name[len(POOL_PREFIX) :].split("-", 1)[0])
    except ValueError:
        return True  # not named by this module: leave it alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _staging_folders() -> set[str]:
    """Every folder a pool's segment or pipes may be in: /dev/shm, the folder
    DYNARESIZE_SHM_DIR names, and the temp folder."""
    folders = {_SHM_DIR, tempfile.gettempdir()}
    override = os.environ.get("DYNARESIZE_SHM_DIR")
    if override:
        folders.add(override)
    return folders


def staging_entries() -> list[str]:
    """Paths of every staging segment, pipe and grant in this node's folders, whoever owns it."""
    found = []
    for folder in _staging_folders():
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        found += [os.path.join(folder, n) for n in names if n.startswith(POOL_PREFIX)]
    return sorted(found)


def sweep_stale_pools() -> int:
    """Remove pools (and their pipes) whose owner process is gone, e.g. a killed worker actor,
    which never got to close its pool. Returns how many segments were removed."""
    removed = 0
    for folder in _staging_folders():
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for entry in names:
            if not entry.startswith(POOL_PREFIX):
                continue
            pool = entry.split(".", 1)[0]
            if _owner_alive(pool):
                continue
            with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                os.unlink(os.path.join(folder, entry))
                removed += entry == pool
    return removed
