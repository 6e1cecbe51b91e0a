"""Deferred optimizer reload: optimizer state arrives after the boundary, before anything reads it.

On a resize only the weights are needed to start the next step's forward and backward; the AdamW
moments are read by the optimizer update at the very end of that step. So the moments (several
times the bytes of the weights) load in a background thread while the step runs, and the first
`optimizer.step()` on the new split waits for them: a step pre-hook blocks until the load has
finished and installs the loaded state into the optimizer, then removes itself. The update can
therefore never read stale or zero moments (a test checks the values it used), and the time the
step had to wait is kept, because that wait is part of the resize's background cost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch

LoadedState = dict[torch.Tensor, dict[str, Any]]
"""Per parameter (the optimizer's own parameter objects), the state entries to install."""


class DeferredLoadError(RuntimeError):
    """The background load of optimizer state failed; the update must not run without it."""


class DeferredOptimizerState:
    """Loads optimizer state in the background and holds the first `step()` until it is in place.

    `load` runs in a thread and returns the state to install (tensors already on the optimizer's
    device). `step()` of `optimizer` calls `wait_and_install` through a pre-hook; callers may also
    call it themselves, earlier, at any synchronisation point of their own.
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, load: Callable[[], LoadedState], *, name: str = ""
    ) -> None:
        self.optimizer = optimizer
        self.name = name or "optimizer state"
        self._load = load
        self._loaded: LoadedState | None = None
        self._error: BaseException | None = None
        self._finished = threading.Event()
        self.waiting = threading.Event()
        """Set when a step (or caller) starts waiting for the load: the synchronisation point."""
        self.waited_s = 0.0
        """How long the synchronisation point blocked (0 when the load had already finished)."""
        self.installed = False
        self._hook = optimizer.register_step_pre_hook(self._before_step)
        self._thread = threading.Thread(target=self._run, name=f"deferred-{self.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._loaded = self._load()
        except BaseException as exc:  # re-raised at the synchronisation point
            self._error = exc
        finally:
            self._finished.set()

    @property
    def done(self) -> bool:
        """True once the background load has finished (successfully or not)."""
        return self._finished.is_set()

    def _before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.wait_and_install()

    def wait_and_install(self, timeout_s: float | None = None) -> float:
        """Block until the state is loaded, install it, and return how long this call waited."""
        if self.installed:
            return 0.0
        started = time.perf_counter()
        self.waiting.set()
        if not self._finished.wait(timeout_s):
            raise DeferredLoadError(f"{self.name} did not finish loading within {timeout_s} s")
        self.waited_s = time.perf_counter() - started
        self._hook.remove()
        if self._error is not None:
            raise DeferredLoadError(f"loading {self.name} failed: {self._error!r}") from self._error
        assert self._loaded is not None
        known = {id(p) for group in self.optimizer.param_groups for p in group["params"]}
        for param, state in self._loaded.items():
            if id(param) not in known:
                raise DeferredLoadError(f"{self.name}: loaded state for a parameter not optimized")
            self.optimizer.state[param] = dict(state)
        self._loaded = None
        self.installed = True
        return self.waited_s
