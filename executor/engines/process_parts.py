"""The parts of an engine process the parent keeps: its error, its timings, the processes it
started and how they are all ended (`process.py` is the engine process itself)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from .process_buffers import remove_path
from .process_child import spawn


class EngineProcessError(RuntimeError):
    """The engine process failed: its engine raised, it died, or it stopped answering."""

    def __init__(
        self, message: str, *, operation: str, error_type: str = "", child_traceback: str = ""
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.error_type = error_type
        self.child_traceback = child_traceback


@dataclass(frozen=True)
class StartTiming:
    """Where the seconds of an engine process's start went."""

    process_s: float
    """From the spawn call to the child's first line: interpreter, bootstrap, its module."""
    import_s: float
    """Unpickling the factory and its `preload`: torch, the engine's modules, vLLM."""
    engine_s: float
    """Building the engine (vLLM: `LLM(...)`, the model read from its folder, the KV cache)."""
    total_s: float
    """The spawn call until the ready answer arrived here."""


@dataclass(frozen=True)
class WeightLoadTiming:
    """One `load_weights`: the copy into shared memory here, the engine's load there."""

    copy_s: float
    """Writing the weights into the shared buffer (0 when they were received into it)."""
    engine_s: float
    """The engine's in-place load in the child, shared-memory mapping included."""
    total_s: float
    nbytes: int
    digest: str
    """`weights_digest` of the weights as the child read them."""
    deferred: bool
    """The engine was released: the weights load when it is rebuilt."""


@dataclass(frozen=True)
class Launched:
    process: subprocess.Popen[bytes]
    conn: Connection
    spawned_s: float


def shut_down(children: list[tuple[Any, Any]], paths: list[Path]) -> None:
    """Kill every child that still runs, close the pipes, remove every buffer name made here
    and the owned folders. Runs once: from `close`, a failure, garbage collection or
    interpreter exit."""
    for process, conn in children:
        if process.poll() is None:
            process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10.0)
        with contextlib.suppress(OSError):
            conn.close()
    for path in paths:
        remove_path(path)


def resident_bytes(pid: int | None) -> int | None:
    """A process's resident memory (Linux `/proc`), None where it cannot be read."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def launch(payload: bytes, children: list[tuple[Any, Any]]) -> Launched:
    """A new engine process (`process_child.spawn`) given the pickled factory: it imports what
    the engine needs and waits for `build`. Added to `children` before anything can fail."""
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    spawned = time.monotonic()
    try:
        process = spawn(child_end.fileno())
    except BaseException:
        parent_end.close()
        raise
    finally:
        child_end.close()  # it lives in the child only, so the child's exit closes the pipe
    conn = Connection(parent_end.detach())
    children.append((process, conn))
    conn.send_bytes(payload)
    return Launched(process, conn, spawned)
