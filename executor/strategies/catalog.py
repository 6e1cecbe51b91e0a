"""Every resize strategy by its config name (`live.resize_strategy`)."""

from __future__ import annotations

from dynaresize.traces.phases import StrategyName

from .host_sync import HostSyncStrategy
from .overlapped import OverlappedStrategy
from .stop_and_rebuild import StopAndRebuildStrategy
from .strategy import ResizeStrategy

STRATEGIES: dict[StrategyName, type[ResizeStrategy]] = {
    StrategyName.HOST_SYNC: HostSyncStrategy,
    StrategyName.OVERLAPPED: OverlappedStrategy,
    StrategyName.STOP_AND_REBUILD: StopAndRebuildStrategy,
}


def build_strategy(name: StrategyName) -> ResizeStrategy:
    """The strategy object for a config's `resize_strategy`, with its default settings."""
    return STRATEGIES[name]()
