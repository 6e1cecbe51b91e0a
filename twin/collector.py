"""Full collections of Python's cyclic garbage collector held off while a run builds its records.

A long run keeps millions of small objects alive until its tables are built (a decision row
per step, two busy intervals per step, the resize log). Each full collection visits every one
of them again, and with the collector's defaults they come about every time the live objects
grow by a quarter: at a million steps that is a fifth of the run's time, freeing nothing (the
pipeline makes no cyclic garbage). The young generations still run as usual, so cyclic garbage a
policy makes at a step is still freed within a few thousand allocations; only the oldest
generation waits, and the thresholds are put back when the run is done.

The youngest generation is collected less often too: every step makes a few dozen short-lived
containers (an observation, its predictions, a decision), freed by their reference counts, and a
collection every 700 of them (the default) costs a few percent of a run while finding nothing.
At `_YOUNG_THRESHOLD` cyclic garbage a policy makes is still freed every few thousand steps.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["full_collections_held"]

_HELD_THRESHOLD = 1_000_000
"""Collections of the middle generation before a full one: never reached by one run."""
_YOUNG_THRESHOLD = 100_000
"""Allocations of containers, less those freed, between collections of the youngest generation
during a run."""


@contextmanager
def full_collections_held() -> Iterator[None]:
    """Within the block, the collector runs only its two young generations, the youngest
    less often."""
    young, middle, oldest = gc.get_threshold()
    gc.set_threshold(max(young, _YOUNG_THRESHOLD), middle, max(oldest, _HELD_THRESHOLD))
    try:
        yield
    finally:
        gc.set_threshold(young, middle, oldest)
