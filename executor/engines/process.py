"""A rollout engine in a child process of its own, behind the same interface as in-process ones.

Why a process: in-process vLLM makes torch.distributed's default process group its own (world
size 1) and destroys it when released; a live worker's default group is the training world, so
vLLM must not share the worker's process. `EngineProcess` starts the engine in a fresh
interpreter (never a fork) and is itself a `RolloutEngine` with vLLM's lifecycle
(`release`, `rebuild`, `close`). The engine is whatever a picklable factory builds there
(`build.py` has the factories).

How data crosses (the child's side is `process_child.py`): requests, sampling parameters and
results are pickled over a pipe (they are small); weights go through a buffer both sides map
(`process_buffers.py`): on CUDA a device buffer of this process shared by its IPC handle, so
weights reach the engine's parameters without leaving the device; elsewhere a file in shared
memory. `staging_tensor` gives the buffer itself, so a caller can receive a broadcast straight
into it and `load_weights` copies nothing on this side. The buffer holds the weights loaded last
(a released engine reads them when rebuilt): write into it only right before `load_weights`,
which waits for the device's writes before the engine reads.

`end_on_release` (vLLM's `release: destroy` on CUDA): `release` ends the engine's process (the
one way all its device memory comes back), frees a device buffer and starts a spare that does
the imports and waits; `rebuild` has the spare build the engine (from its folder's weights when
the buffer was on a device: load the current ones after it).

Failures: an exception in the child comes back as one `EngineProcessError` naming the engine,
the operation and the child's error, with the child's traceback attached; an `EngineInputError`
(a request the engine cannot run) is raised as itself. A child that dies, or does not answer in
time (it is then killed), is an `EngineProcessError` with its exit status; the engine process
is unusable after it.

Timings, for the resize records: `start_timing` splits the start into process, imports and
engine build; `release()` and `rebuild()` return their seconds; `last_load` times each weight
load and carries the digest the child computed.
"""

from __future__ import annotations

import contextlib
import pickle
import re
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from .device_share import finish_writes
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
    Layout,
    WeightBuffer,
    buffer_path,
    device_buffer,
    flat_view,
    remove_path,
    remove_stale_buffers,
    reserve_file,
)
from .process_child import ChildFailure, LoadReply, StartReply
from .process_parts import (
    EngineProcessError,
    Launched,
    StartTiming,
    WeightLoadTiming,
    launch,
    resident_bytes,
    shut_down,
)

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")

EngineFactory = Callable[[], RolloutEngine]
"""Builds the engine in the child; must pickle. An optional `preload()` method imports what the
engine needs first, so that the start's import time is measured apart from the build."""


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
        end_on_release: bool = False,
    ) -> None:
        """Start the engine process and wait until its engine is built (`start_timing`).
        `owned_paths`: folders written for this engine (its model folder), removed when the
        process ends, whichever way. `end_on_release`: release ends the process (see above)."""
        self.name = _SAFE_NAME.sub("_", name)[:80] or "engine"
        self.call_timeout_s = call_timeout_s
        self.shm_dir = Path(shm_dir)
        if not self.shm_dir.is_dir():
            raise FileNotFoundError(f"engine process shm_dir: {self.shm_dir} is not a folder")
        self.stale_buffers_removed = remove_stale_buffers(self.shm_dir)
        try:
            self._payload = pickle.dumps(factory)
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
        self.end_on_release = end_on_release
        self._start_timeout_s = start_timeout_s
        self._last_layout: Layout | None = None
        self._ended = False  # the engine's process was ended by `release` (`end_on_release`)
        self._spare: Launched | None = None
        self._children: list[tuple[subprocess.Popen[bytes], Connection]] = []
        """Every process started here (the engine's, a spare), shared with the finalizer."""
        self._finalizer = weakref.finalize(self, shut_down, self._children, self._paths)
        try:
            self.start_timing = self._build(self._launch())
        except BaseException:
            self._finalizer()
            raise

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
        buffer = self._buffer_for(flat.numel(), flat.dtype, flat.device)
        copying = flat.data_ptr() != buffer.tensor.data_ptr()
        if copying:
            buffer.tensor.copy_(flat)
        finish_writes(buffer.tensor)  # the engine process reads on streams of its own
        copied = time.monotonic() - begin if copying else 0.0
        self._last_layout = names_shapes
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
        if self.end_on_release:
            self._call("exit", None, doing="ending the engine process")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=60.0)  # its memory is back once it is gone
            self._ended = True
            self._drop_device_buffer()
            self._spare = self._launch()  # imports while the worker trains
        else:
            self._call("release", None, doing="releasing the engine")
        self._released = True
        return time.monotonic() - begin

    def rebuild(self) -> float:
        """Build (or wake) the engine again, with the last weights loaded; seconds seen here."""
        begin = time.monotonic()
        if self._ended:
            launched, self._spare = self._spare or self._launch(), None
            self._build(launched)
            self._ended = False
            self._map_again()
        else:
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
        """Its process runs, or was ended by a release and can be rebuilt."""
        return self._finalizer.alive and (self._ended or self._process.poll() is None)

    def staging_tensor(
        self, numel: int, dtype: torch.dtype, device: torch.device | str = "cpu"
    ) -> torch.Tensor:
        """The shared buffer for weights of this size and dtype: receive weights into it and
        pass it to `load_weights` to skip the copy on this side."""
        return self._buffer_for(numel, dtype, torch.device(device)).tensor

    def rss_bytes(self) -> int | None:
        """The child's resident memory (Linux), e.g. to see what a released engine keeps."""
        return resident_bytes(self.pid)

    # -- internals -----------------------------------------------------------------------------

    def _launch(self) -> Launched:
        """A new process that imports what the engine needs and waits for `build`."""
        return launch(self._payload, self._children)

    def _build(self, launched: Launched) -> StartTiming:
        """Make `launched` the engine's process and have it build the engine."""
        self._process, self._conn = launched.process, launched.conn
        doing = "starting the engine"
        try:
            self._conn.send(("build", None))
        except (BrokenPipeError, EOFError, OSError):
            raise self._died(doing) from None
        reply: StartReply = self._receive(doing, timeout_s=self._start_timeout_s)
        return StartTiming(
            process_s=reply.entered_s - launched.spawned_s,
            import_s=reply.import_s,
            engine_s=reply.engine_s,
            total_s=time.monotonic() - launched.spawned_s,
        )

    def _drop_device_buffer(self) -> None:
        """A device buffer would keep a copy of the weights on a worker whose engine is gone:
        free it (the engine built again starts from its folder; the caller loads new weights,
        as a worker does after every start)."""
        if self._buffer is not None and self._buffer.device is not None:
            self._buffer = None
            self.last_load = None
            torch.cuda.ipc_collect()  # blocks the ended engine process had mapped, now released
            torch.cuda.empty_cache()

    def _map_again(self) -> None:
        """A new engine process: map the weight buffer there and load the weights it holds (a
        shared-memory file, whose name is gone, is copied into a new one first)."""
        old = self._buffer
        if old is None:
            return
        if old.device is None:
            self._buffer = None
            self._buffer_for(old.numel, old.dtype, old.tensor.device).tensor.copy_(old.tensor)
        else:
            self._call("map_buffer", old.message(None), doing="sharing the weight buffer")
        if self.last_load is not None:
            message = self._buffer_for(old.numel, old.dtype, old.tensor.device).message(
                self._last_layout
            )
            self._call("load_weights", message, doing="loading weights")

    def _buffer_for(self, numel: int, dtype: torch.dtype, device: torch.device) -> WeightBuffer:
        buffer = self._buffer
        if (
            buffer is not None
            and buffer.numel == numel
            and buffer.dtype == dtype
            and buffer.tensor.device == device
        ):
            return buffer
        if device.type == "cuda":
            buffer = device_buffer(numel, dtype, device)
            self._call("map_buffer", buffer.message(None), doing="sharing the weight buffer")
            self._buffer = buffer
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
