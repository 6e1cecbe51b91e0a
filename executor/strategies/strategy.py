"""What a resize strategy is: one `Strategy` object, and the slot its driver half fills.

A `Strategy` names everything of one way to resize: its driver half (a `ResizeStrategy`), its
worker half (methods the live worker's actor class gains), the phases it records and the setup
parts its resize repeats (the prior before a resize is measured). `catalog.STRATEGIES` lists
every strategy, one line each.

`ResizeStrategy` is the slot every driver half fills (`strategies/`: host_sync, overlapped,
stop_and_rebuild). The driver calls `resize()` at a step boundary and records the phases it
returns under the shared phase names; `after_step()` lets a strategy do background work between
resizes (a communicator cache prewarms there) and `before_train()` is the synchronisation point a
strategy with deferred work must honour before the first optimizer step reads the state (a
deferred optimizer reload completes there). `PhaseLog` times the phases on the run's clock.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dynaresize.traces.phases import PhaseName, StrategyName

from ..cluster.runtime import Runtime
from ..cluster.worker_setup import SetupPart
from ..roles import RoleMap
from ..staging.paths import TransferStat
from ..worker.state import WorkerState


@dataclass(frozen=True)
class PhaseTiming:
    """One phase as it happened, on the run's clock."""

    phase: PhaseName
    start_s: float
    end_s: float
    critical: bool
    bytes_moved: int = 0
    transfers: tuple[TransferStat, ...] = ()
    """Each piece of state the phase moved between workers: path, bytes, seconds."""
    comm_cache_hits: int | None = None
    """Groups of the target split the phase took from the communicator cache (None: none bound)."""
    comm_groups_built: int | None = None
    """Groups the phase built on the spot (None: none bound)."""


@dataclass
class PhaseLog:
    """Collects a resize's phases; `with log.phase(NAME):` times one on the run's clock."""

    runtime: Runtime
    phases: list[PhaseTiming] = field(default_factory=list)

    @contextmanager
    def phase(self, name: PhaseName, *, critical: bool = True) -> Iterator[dict]:
        extra: dict[str, Any] = {
            "bytes_moved": 0,
            "transfers": (),
            "comm_cache_hits": None,
            "comm_groups_built": None,
        }
        start = self.runtime.clock()
        yield extra
        self.phases.append(
            PhaseTiming(
                phase=name,
                start_s=start,
                end_s=self.runtime.clock(),
                critical=critical,
                bytes_moved=int(extra["bytes_moved"]),
                transfers=tuple(extra["transfers"]),
                comm_cache_hits=extra["comm_cache_hits"],
                comm_groups_built=extra["comm_groups_built"],
            )
        )


class ResizeStrategy(ABC):
    """How a resize is carried out. One object per run; it may keep state between resizes."""

    name: StrategyName

    def after_step(self, runtime: Runtime) -> None:  # noqa: B027 - optional hook
        """Called after every step's records: background preparation (nothing by default)."""

    def before_train(self, runtime: Runtime) -> None:  # noqa: B027 - optional hook
        """Called before every training step: finish whatever the update is about to read."""

    def pop_background_phases(self) -> list[PhaseTiming]:
        """Background phases that ended since the last call (the driver records them)."""
        return []

    def release(self, runtime: Runtime) -> None:  # noqa: B027 - optional hook
        """Free what the strategy holds on the workers (staging pools, cached groups) after a
        run that ended well; the driver calls it before stopping the workers."""

    @abstractmethod
    def resize(self, runtime: Runtime, *, target: RoleMap) -> list[PhaseTiming]:
        """Move the workers from `runtime.roles` to `target`; set `runtime.roles`."""


@dataclass(frozen=True)
class Strategy:
    """One way to resize, in one place: what `catalog.STRATEGIES` holds, one per name."""

    driver: type[ResizeStrategy]
    """The driver half: carries out a resize through the runtime (one object per run)."""
    worker: type[WorkerState]
    """The worker half: the methods the driver half calls on the workers; the actor class of
    the live worker includes it (`catalog.live_worker_class`)."""
    phases: tuple[PhaseName, ...]
    """Every phase a resize records, in the order it runs them (the twin's name for each piece
    of the work; `twin.costs.resize_strategies.STRATEGY_COSTS` says which table prices them)."""
    setup_parts: tuple[SetupPart, ...]
    """The parts of the setup a resize repeats: their sum is the resize-cost prior until a
    resize is measured (`observe/setup_prior.py`)."""

    @property
    def name(self) -> StrategyName:
        return self.driver.name
