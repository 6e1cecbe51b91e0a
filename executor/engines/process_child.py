"""The child side of a rollout engine process: build the engine, answer requests, die with the
parent.

The engine process (`process.py`) starts `main` in a fresh interpreter through `spawn` here
(`sys.executable`, never a fork: the parent holds a torch.distributed world group, CUDA state
and Ray's threads, none of which survive being copied), with one end of a socket pair as its
pipe. The engine then lives
alone in its process: in-process vLLM initialises torch.distributed's default group and destroys
it on release, which would break a worker whose default group is the training world.

This module imports only the standard library at its top, so the start splits honestly into
process start (interpreter, bootstrap, this module), imports (unpickling the engine factory pulls
in torch and the engine's modules; its `preload` pulls in vLLM) and the engine build.

The conversation, one request at a time over a duplex pipe:

    parent -> child   the pickled factory, once (the child imports what it needs at once);
                      then (operation, payload) tuples: build (first, once: the engine is
                      built) | generate (requests, params, step) | map_buffer (WeightsMessage)
                      | load_weights (WeightsMessage) | release | rebuild | close | exit
    child -> parent   ("ok", value) or ("error", ChildFailure)

A parent may send the factory and wait before asking for the build: the process then waits with
its imports done, a warm spare that a rebuild turns into an engine without paying for them.
`exit` ends the process at once, without closing the engine: its memory (on a GPU too) goes
back when the process is gone, which is the only way vLLM's CUDA memory all comes back.

Weights never travel through the pipe. On CUDA they live in a device buffer of the parent that
the child maps by its IPC handle (`device_share.py`) once; otherwise in a file in shared memory
(/dev/shm) that the parent creates and both sides map; the child maps it as soon as it is
created (`map_buffer`) and removes its name, so from then on the buffer has no name either
side could leak, and it disappears with the last process mapping it. A load then only says
which buffer to read.

The child goes away with its parent in three ways: PR_SET_PDEATHSIG (Linux; set only when the
parent started it from its main thread, because the signal follows the thread that forked), a
watchdog thread that exits when the parent's pid is no longer its parent, and the end of file on
the pipe when the parent's end closes. It ignores SIGINT: a Ctrl-C reaches the whole process
group, and the parent decides what happens to its engine.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import subprocess

PR_SET_PDEATHSIG = 1
WATCHDOG_PERIOD_S = 0.5


@dataclass(frozen=True)
class ChildFailure:
    """An exception raised in the child, as the parent receives it."""

    operation: str
    error_type: str
    """Qualified name of the exception's class, e.g. `...vllm_engine.VLLMStartError`."""
    message: str
    """The exception's message on one line."""
    traceback: str
    exception: bytes | None
    """The exception pickled, when it pickles (the parent re-raises engine input errors as is)."""


@dataclass(frozen=True)
class WeightsMessage:
    """Where the parent put a weight update: `numel` elements of `dtype` in shared memory."""

    path: str
    numel: int
    dtype: str
    """A torch dtype name without the `torch.` prefix: float32, bfloat16, ..."""
    names_shapes: tuple[tuple[str, tuple[int, ...]], ...] | None
    """A state dict laid out flat, in this order; None: a flat tensor in `named_parameters`
    order, as the engine takes it."""
    device: Any = None
    """A parent's CUDA buffer (`device_share.SharedDeviceTensor`); `path` is then its key."""


@dataclass(frozen=True)
class StartReply:
    entered_s: float
    """`time.monotonic()` when `child_main` began (the clock is system-wide on Linux)."""
    import_s: float
    engine_s: float


@dataclass(frozen=True)
class LoadReply:
    map_s: float
    """Mapping the shared buffer (0 when it is mapped already)."""
    engine_s: float
    """The engine's own load (0 while it is released: it loads at the next rebuild)."""
    digest: str
    """`weights_digest` of the buffer as the child read it."""
    deferred: bool


BOOTSTRAP = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from dynaresize.executor.engines.process_child import main; main(sys.argv[2:])"
)


def spawn(child_fd: int) -> subprocess.Popen[bytes]:
    """A fresh interpreter running the child's loop on `child_fd`, with this process's import
    path (so it imports this very copy of the project). Deliberately not multiprocessing's
    spawn: that re-runs the parent's main module in the child (a script's top-level imports, a
    Ray worker's own entry point), which took 10-13 s on a loaded 2-core machine against
    1.3-1.9 s for this start."""
    import subprocess  # the parent's alone: the child's start stays on its few imports

    from_main_thread = threading.current_thread() is threading.main_thread()
    argv = [
        json.dumps(sys.path),
        str(child_fd),
        str(os.getpid()),
        "pdeathsig" if from_main_thread else "watchdog",
    ]
    return subprocess.Popen([sys.executable, "-c", BOOTSTRAP, *argv], pass_fds=(child_fd,))


def main(argv: list[str]) -> None:
    """Entry point: `argv` is (pipe fd, parent pid, `pdeathsig` or `watchdog`)."""
    entered_s = time.monotonic()
    from multiprocessing.connection import Connection

    fd, parent_pid, how = int(argv[0]), int(argv[1]), argv[2]
    child_main(Connection(fd), parent_pid, how == "pdeathsig", entered_s=entered_s)


def child_main(conn: Any, parent_pid: int, set_pdeathsig: bool, *, entered_s: float) -> None:
    """The engine process's whole life; returns only through `os._exit`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent_pid, set_pdeathsig)
    code = 0
    try:
        host = _start(conn, entered_s)
        if host is not None:
            _serve(conn, host)
    except (EOFError, OSError):
        code = 1  # the parent's end closed: nobody to answer
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        # A plain exit would wait for threads the engine left running (vLLM starts some).
        os._exit(code)


def _die_with_parent(parent_pid: int, set_pdeathsig: bool) -> None:
    if set_pdeathsig and sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # it died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(WATCHDOG_PERIOD_S)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _start(conn: Any, entered_s: float) -> _Host | None:
    """Unpickle the factory, let it import what it needs, wait for `build`, build the engine;
    report timings."""
    payload = conn.recv_bytes()  # a closed pipe ends the child (child_main catches it)
    try:
        begin = time.monotonic()
        factory = pickle.loads(payload)
        preload = getattr(factory, "preload", None)
        if callable(preload):
            preload()
        import_s = time.monotonic() - begin
    except BaseException as error:
        conn.send(("error", _failure("start", error)))
        return None
    operation, _payload = conn.recv()
    if operation != "build":
        conn.send(("ok", None))  # close or exit before any engine: nothing to do
        return None
    try:
        building = time.monotonic()
        host = _Host(factory)
        engine_s = time.monotonic() - building
    except BaseException as error:
        conn.send(("error", _failure("start", error)))
        return None
    conn.send(("ok", StartReply(entered_s, import_s, engine_s)))
    return host


def _serve(conn: Any, host: _Host) -> None:
    while True:
        operation, payload = conn.recv()
        try:
            value = host.handle(operation, payload)
        except Exception as error:
            conn.send(("error", _failure(operation, error)))
            continue
        conn.send(("ok", value))
        if operation in ("close", "exit"):
            return


def _failure(operation: str, error: BaseException) -> ChildFailure:
    kind = type(error)
    pickled: bytes | None
    try:
        pickled = pickle.dumps(error)
        pickle.loads(pickled)
    except Exception:  # one that does not round-trip is sent as text only
        pickled = None
    return ChildFailure(
        operation=operation,
        error_type=f"{kind.__module__}.{kind.__qualname__}",
        message=one_line(error),
        traceback="".join(traceback.format_exception(error)),
        exception=pickled,
    )


def one_line(error: BaseException) -> str:
    """The last non-empty line of the message (where engines put the reason), or the type."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


class _Host:
    """The engine and the shared weight buffer, on the child's side."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory
        self.engine: Any = factory()
        self.released = False
        self.released_by_engine = False
        """The engine released itself (vLLM: destroyed or asleep) and can rebuild itself."""
        self.mapped: dict[str, Any] = {}
        """path -> the flat tensor mapped from it (the newest one last)."""
        self.current: WeightsMessage | None = None
        self.deferred = False

    def handle(self, operation: str, payload: Any) -> Any:
        if operation == "generate":
            requests, params, step = payload
            return self._running().generate(requests, params, step=step)
        if operation == "map_buffer":
            self._map(payload)
            return None
        if operation == "load_weights":
            return self.load_weights(payload)
        if operation == "release":
            return self.release()
        if operation == "rebuild":
            return self.rebuild()
        if operation == "close":
            closed = self.close()
            self._unmap()
            return closed
        if operation == "exit":
            self._unmap()
            return None  # the process ends right after the answer; the engine is not closed
        raise ValueError(f"unknown engine process operation {operation!r}")

    def load_weights(self, message: WeightsMessage) -> LoadReply:
        begin = time.monotonic()
        flat = self._map(message)
        mapped = time.monotonic()
        self.current = message
        if self.released:
            self.deferred = True  # the engine is gone or asleep; rebuild loads them
        else:
            self.engine.load_weights(self._weights(message, flat))
            self.deferred = False
        loaded = time.monotonic()
        from ..rl.weights_digest import weights_digest

        return LoadReply(mapped - begin, loaded - mapped, weights_digest(flat), self.released)

    def release(self) -> float:
        begin = time.monotonic()
        self._running()
        if callable(getattr(self.engine, "release", None)):
            self.engine.release()
            self.released_by_engine = True
        else:  # an engine without a lifecycle of its own is dropped and built again
            self.engine = None
            gc.collect()
            _empty_cuda_cache()
            self.released_by_engine = False
        self.released = True
        return time.monotonic() - begin

    def rebuild(self) -> float:
        if not self.released:
            raise RuntimeError("rebuild called while the engine is running")
        begin = time.monotonic()
        if self.released_by_engine:
            self.engine.rebuild()  # it reloads the last weights it was given itself
        else:
            self.engine = self.factory()
        self.released = False
        if self.current is not None and (self.deferred or not self.released_by_engine):
            flat = self.mapped[self.current.path]
            self.engine.load_weights(self._weights(self.current, flat))
        self.deferred = False
        return time.monotonic() - begin

    def close(self) -> float:
        begin = time.monotonic()
        if self.engine is not None and callable(getattr(self.engine, "close", None)):
            self.engine.close()
        self.engine = None
        return time.monotonic() - begin

    def _running(self) -> Any:
        if self.released or self.engine is None:
            raise RuntimeError("the engine is released; call rebuild() first")
        return self.engine

    def _map(self, message: WeightsMessage) -> Any:
        """The buffer as a flat tensor, mapped once per buffer; its name is removed right away
        (both sides hold the mapping, so the memory lives on without a name to leak)."""
        if message.path in self.mapped:
            return self.mapped[message.path]
        import torch

        if message.device is not None:
            from .device_share import open_shared

            flat = open_shared(message.device)
        else:
            flat = torch.from_file(
                message.path, shared=True, size=message.numel, dtype=getattr(torch, message.dtype)
            )
            with contextlib.suppress(FileNotFoundError):
                os.unlink(message.path)
        # keep the buffer of the weights loaded last (a rebuild reads it), drop any other
        current = self.current.path if self.current is not None else None
        self.mapped = {p: t for p, t in self.mapped.items() if p == current}
        self.mapped[message.path] = flat
        return flat

    def _unmap(self) -> None:
        """Let go of every mapped buffer before the process ends. The owner of a CUDA buffer
        frees it only once each process that mapped it has released its mapping (torch counts
        them); a process that ends still holding one leaves the owner a weights-sized block it
        can never free. The engine lets go of what it kept too: vLLM on CUDA keeps the last
        weights as views of the buffer, for a wake that reloads them."""
        forget = getattr(self.engine, "forget_weights", None)
        if callable(forget):
            forget()
        self.mapped.clear()
        gc.collect()

    @staticmethod
    def _weights(message: WeightsMessage, flat: Any) -> Any:
        if message.names_shapes is None:
            return flat
        state, offset = {}, 0
        for name, shape in message.names_shapes:
            size = 1
            for dim in shape:
                size *= dim
            state[name] = flat[offset : offset + size].view(shape)
            offset += size
        return state


def _empty_cuda_cache() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
