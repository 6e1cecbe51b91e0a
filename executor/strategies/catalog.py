"""Every resize strategy, one line each, by its config name (`live.resize_strategy`).

A strategy is one `Strategy` object (`strategy.py`), defined beside its driver half: the driver
half, the worker half, the phases it records and the setup parts its resize repeats. Adding one
is a line in `STRATEGIES`; the actor class every worker is started from takes every listed
worker half (`live_worker_class`), so no other file changes on the worker side.
"""

from __future__ import annotations

from dynaresize.traces.phases import StrategyName

from ..worker.actor import LiveWorker, with_worker_halves
from .host_sync import HOST_SYNC
from .overlapped import OVERLAPPED
from .stop_and_rebuild import STOP_AND_REBUILD
from .strategy import ResizeStrategy, Strategy

STRATEGIES: dict[StrategyName, Strategy] = {
    s.name: s
    for s in (
        HOST_SYNC,
        OVERLAPPED,
        STOP_AND_REBUILD,
    )
}


def build_strategy(name: StrategyName) -> ResizeStrategy:
    """The driver half for a config's `resize_strategy`, with its default settings."""
    return STRATEGIES[name].driver()


def live_worker_class(base: type[LiveWorker] = LiveWorker) -> type[LiveWorker]:
    """The class every worker actor is made of: `base` (the live worker, or a subclass of it
    such as the benchmarks' `BenchWorker`) with the worker half of every listed strategy."""
    return with_worker_halves(base, [s.worker for s in STRATEGIES.values()])
