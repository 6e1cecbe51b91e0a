"""A rollout engine in a child process of its own, behind the same interface as in-process ones.

Why a process: in-process vLLM makes torch.distributed's default process group its own (world
size 1) and destroys it when released; a live worker's default group is the training world, so
vLLM must not share the worker's process. `EngineProcess` starts the engine in a fresh
interpreter (never a fork) and is itself a `RolloutEngine` with vLLM's lifecycle
(`release`, `rebuild`, `close`), so the worker drives it as it drives any engine. It is generic:
the engine is whatever a picklable factory builds there (`executor/engines/build.py` has the
factories for vLLM and for the project's own sampler).

How data crosses (the child's side is `process_child.py`): requests, sampling parameters and
results are pickled over a pipe (they are small); weights go through a file in shared memory
(`process_buffers.py`, which says how it lives and is removed). `staging_tensor` gives the buffer
itself, so a caller can receive a broadcast straight into it and `load_weights` copies nothing on
this side. The buffer holds the weights loaded last (a released engine reads them when
rebuilt): write into it only right before `load_weights`.

Failures: an exception in the child comes back as one `EngineProcessError` naming the engine,
the operation and the child's error (`VLLMStartError: vLLM could not start on model folder X:
...`), with the child's traceback attached; an `EngineInputError` (a request the engine cannot
run) is raised as itself, as an in-process engine would. A child that dies, or does not answer
within the timeout (it is then killed), is an `EngineProcessError` with its exit status, and the
engine process is unusable after it.

Timings, for the resize records: `start_timing` splits the start into process, imports and engine
build (the `rollout_reinit` phase when a replica starts an engine); `release()` and `rebuild()`
return their seconds as seen here (a release is its own phase); `last_load` times each weight
load (copy into shared memory, the engine's load) and carries the digest the child computed.
"""

from __future__ import annotations

import contextlib
import pickle
import re
import signal
import socket
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from .interface import (
    EngineInputError,
    GenerationOutput,
    GenerationRequest,
    RolloutEngine,
    SamplingParams,
    Weights,
)
from .process_buffers import (
    DEFAULT_SHM_DIR,
    WeightBuffer,
    buffer_path,
    flat_view,
    remove_path,
    remove_stale_buffers,
    reserve_file,
)
from .process_child import ChildFailure, LoadReply, StartReply, spawn

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")

EngineFactory = Callable[[], RolloutEngine]
"""Builds the engine in the child; must pickle. An optional `preload()` method imports what the
engine needs first, so that the start's import time is measured apart from the build."""


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


class EngineProcess:
    """A `RolloutEngine` running in a child process; `close()` (or `with`) ends it."""

    def __init__(
        self,
        factory: EngineFactory,
        *,
        name: str,
        start_timeout_s: float = 900.0,
        call_timeout_s: float = 900.0,
        shm_dir: Path = DEFAULT_SHM_DIR,
        owned_paths: Sequence[Path] = (),
    ) -> None:
        """Start the engine process and wait until its engine is built (`start_timing`).
        `owned_paths`: folders written for this engine (its model folder), removed when the
        process ends, whichever way."""
        self.name = _SAFE_NAME.sub("_", name)[:80] or "engine"
        self.call_timeout_s = call_timeout_s
        self.shm_dir = Path(shm_dir)
        if not self.shm_dir.is_dir():
            raise FileNotFoundError(f"engine process shm_dir: {self.shm_dir} is not a folder")
        self.stale_buffers_removed = remove_stale_buffers(self.shm_dir)
        try:
            payload = pickle.dumps(factory)
        except Exception as error:
            raise TypeError(f"engine factory {factory!r} does not pickle: {error}") from error
        self._lock = threading.Lock()
        self._buffer: WeightBuffer | None = None
        self._paths: list[Path] = list(owned_paths)
        """Buffer names made here and the owned folders; each removed on every path (the list
        is shared with the finalizer, which must not hold `self`)."""
        self._released = False
        self._broken: str | None = None
        self.last_load: WeightLoadTiming | None = None
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        spawned = time.monotonic()
        try:
            self._process = spawn(child_end.fileno())
        except BaseException:
            parent_end.close()
            raise
        finally:
            child_end.close()  # it lives in the child only, so the child's exit closes the pipe
        self._conn = Connection(parent_end.detach())
        self._finalizer = weakref.finalize(self, _shut_down, self._process, self._conn, self._paths)
        try:
            self._conn.send_bytes(payload)
            reply: StartReply = self._receive("starting the engine", timeout_s=start_timeout_s)
        except BaseException:
            self._finalizer()
            raise
        ready = time.monotonic()
        self.start_timing = StartTiming(
            process_s=reply.entered_s - spawned,
            import_s=reply.import_s,
            engine_s=reply.engine_s,
            total_s=ready - spawned,
        )

    # -- RolloutEngine -------------------------------------------------------------------------

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, step: int
    ) -> GenerationOutput:
        return self._call("generate", (list(requests), params, step), doing="generating")

    def load_weights(self, weights: Weights) -> None:
        """Write `weights` (a flat tensor or a state dict) into shared memory and have the engine
        load them in place; `last_load` holds the timings and the child's digest."""
        begin = time.monotonic()
        flat, names_shapes = flat_view(weights)
        buffer = self._buffer_for(flat.numel(), flat.dtype)
        copied = 0.0
        if flat.data_ptr() != buffer.tensor.data_ptr():
            buffer.tensor.copy_(flat)
            copied = time.monotonic() - begin
        message = buffer.message(names_shapes)
        reply: LoadReply = self._call("load_weights", message, doing="loading weights")
        self.last_load = WeightLoadTiming(
            copy_s=copied,
            engine_s=reply.map_s + reply.engine_s,
            total_s=time.monotonic() - begin,
            nbytes=buffer.numel * buffer.tensor.element_size(),
            digest=reply.digest,
            deferred=reply.deferred,
        )

    # -- lifecycle -----------------------------------------------------------------------------

    def release(self) -> float:
        """Release the engine (vLLM: destroy, or sleep on CUDA; other engines are dropped) and
        keep the process with its imports; seconds as seen here."""
        begin = time.monotonic()
        self._call("release", None, doing="releasing the engine")
        self._released = True
        return time.monotonic() - begin

    def rebuild(self) -> float:
        """Build (or wake) the engine again, with the last weights loaded; seconds seen here."""
        begin = time.monotonic()
        self._call("rebuild", None, doing="rebuilding the engine")
        self._released = False
        return time.monotonic() - begin

    def close(self, *, timeout_s: float = 60.0) -> None:
        """Close the engine and end the process; safe to call twice and after a failure."""
        if self._finalizer.alive and self._broken is None and self._process.poll() is None:
            with contextlib.suppress(EngineProcessError):
                self._call("close", None, doing="closing the engine", timeout_s=timeout_s)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=timeout_s)
        self._finalizer()

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- for the caller ------------------------------------------------------------------------

    @property
    def start_s(self) -> float:
        return self.start_timing.total_s

    @property
    def is_running(self) -> bool:
        """The engine is built and not released."""
        return self.is_alive and not self._released

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def is_alive(self) -> bool:
        return self._finalizer.alive and self._process.poll() is None

    def staging_tensor(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """The shared buffer for weights of this size and dtype: receive weights into it and
        pass it to `load_weights` to skip the copy on this side."""
        return self._buffer_for(numel, dtype).tensor

    def rss_bytes(self) -> int | None:
        """The child's resident memory (Linux), e.g. to see what a released engine keeps."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return None

    # -- internals -----------------------------------------------------------------------------

    def _buffer_for(self, numel: int, dtype: torch.dtype) -> WeightBuffer:
        buffer = self._buffer
        if buffer is not None and buffer.numel == numel and buffer.dtype == dtype:
            return buffer
        path = buffer_path(self.shm_dir, self.name)
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        self._paths.append(path)
        try:
            reserve_file(path, nbytes)
        except OSError as error:
            raise EngineProcessError(
                f"rollout engine {self.name}: no room for {nbytes / 2**20:.0f} MiB of weights in "
                f"{self.shm_dir} ({error.strerror}); free it or set the engine's shm_dir",
                operation="loading weights",
            ) from error
        try:
            tensor = torch.from_file(str(path), shared=True, size=numel, dtype=dtype)
            buffer = WeightBuffer(path=path, numel=numel, dtype=dtype, tensor=tensor)
            self._call("map_buffer", buffer.message(None), doing="sharing the weight buffer")
        finally:
            remove_path(path)  # mapped on both sides (or failed): the name is not needed any more
        self._buffer = buffer
        return buffer

    def _call(
        self, operation: str, payload: Any, *, doing: str, timeout_s: float | None = None
    ) -> Any:
        with self._lock:
            if self._broken is not None:
                raise EngineProcessError(
                    f"rollout engine {self.name} is unusable ({self._broken})", operation=doing
                )
            if not self._finalizer.alive:
                raise EngineProcessError(f"rollout engine {self.name} is closed", operation=doing)
            try:
                self._conn.send((operation, payload))
            except (BrokenPipeError, EOFError, OSError):
                raise self._died(doing) from None
            return self._receive(doing, timeout_s=timeout_s or self.call_timeout_s)

    def _receive(self, doing: str, *, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while not self._conn.poll(min(1.0, max(deadline - time.monotonic(), 0.0))):
            if self._process.poll() is not None and not self._conn.poll(0):
                raise self._died(doing)
            if time.monotonic() >= deadline:
                self._broken = f"no answer within {timeout_s:.0f} s while {doing}"
                self._finalizer()
                raise EngineProcessError(
                    f"rollout engine {self.name} (pid {self.pid}) did not answer within "
                    f"{timeout_s:.0f} s while {doing}; it was stopped",
                    operation=doing,
                )
        try:
            status, value = self._conn.recv()
        except (EOFError, OSError):
            raise self._died(doing) from None
        if status == "ok":
            return value
        raise self._child_error(doing, value)

    def _child_error(self, doing: str, failure: ChildFailure) -> Exception:
        original: BaseException | None = None
        if failure.exception is not None:
            with contextlib.suppress(Exception):
                original = pickle.loads(failure.exception)
        if isinstance(original, EngineInputError):
            return original  # the request was wrong, not the engine: as an in-process engine
        if failure.operation == "start":
            self._broken = "its engine did not start"
        short_type = failure.error_type.rsplit(".", 1)[-1]
        error = EngineProcessError(
            f"rollout engine {self.name} (pid {self.pid}): {doing} failed: "
            f"{short_type}: {failure.message}",
            operation=doing,
            error_type=failure.error_type,
            child_traceback=failure.traceback,
        )
        error.__cause__ = original
        return error

    def _died(self, doing: str) -> EngineProcessError:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=5.0)
        code = self._process.returncode
        if code is not None and code < 0:
            status = f"killed by {signal.Signals(-code).name}"
        else:
            status = f"exit code {code}"
        self._broken = f"its process ended ({status})"
        self._finalizer()
        return EngineProcessError(
            f"rollout engine {self.name} (pid {self.pid}) died while {doing} ({status})",
            operation=doing,
        )


def _shut_down(process: Any, conn: Any, paths: list[Path]) -> None:
    """Kill the child if it still runs, close the pipe, remove every buffer name made here and
    the owned folders. Runs once: from `close`, a failure, garbage collection or interpreter
    exit."""
    if process.poll() is None:
        process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10.0)
    with contextlib.suppress(OSError):
        conn.close()
    for path in paths:
        remove_path(path)
