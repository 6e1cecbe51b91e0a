"""Where a training step's time goes, measured without adding a synchronisation to the step.

On CUDA the step's parts are marked with timing events on the device's stream: the device runs
the step's work asynchronously, so host clocks would charge the forward and backward to whatever
first waits for them (the collective). An event measures when the stream reached the mark; the
elapsed times are read once, after the step's single read of its figures has synchronised. On a
CPU the work is synchronous and the host clock is the measurement.

Memory figures tell whether the step found the device short of memory: the caching allocator's
counts of device allocations and of retries (an allocation that failed, freed the cache and tried
again) over the step, and the free memory at its start. On a device shared by several roles they
are what a slower step after a resize would show first.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

import torch


class PartClock:
    """Marks the end of each named part of one step; `seconds` after the step has synchronised."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self._names: list[str] = []
        self._marks: list[object] = [self._now()]

    def _now(self) -> object:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            return event
        return time.perf_counter()

    def mark(self, name: str) -> None:
        """The part `name` ends here (and the next one starts)."""
        self._names.append(name)
        self._marks.append(self._now())

    def seconds(self) -> dict[str, float]:
        """Each part's seconds; on CUDA only once the stream has passed the last mark."""
        out = {}
        for name, start, end in zip(self._names, self._marks, self._marks[1:], strict=False):
            if self.cuda:
                assert isinstance(start, torch.cuda.Event) and isinstance(end, torch.cuda.Event)
                end.synchronize()
                out[name] = start.elapsed_time(end) / 1000.0
            else:
                assert isinstance(start, float) and isinstance(end, float)
                out[name] = end - start
        return out


class AllocatorCounts(NamedTuple):
    """The caching allocator's counters at one moment (one read of its statistics)."""

    device_allocs: int
    alloc_retries: int
    reserved_bytes: int


def allocator_counts(device: torch.device) -> AllocatorCounts | None:
    """Device allocations and allocation retries of the caching allocator so far, and the memory
    it reserves now; None on a CPU."""
    if device.type != "cuda":
        return None
    stats = torch.cuda.memory_stats(device)
    return AllocatorCounts(
        int(stats.get("num_device_alloc", 0)),
        int(stats.get("num_alloc_retries", 0)),
        int(stats.get("reserved_bytes.all.current", 0)),
    )


def device_free_bytes(device: torch.device) -> int | None:
    """Free memory of the device now, as the driver counts it (every process on it); None on a
    CPU."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return int(torch.cuda.mem_get_info(index)[0])


def host_load_1m() -> float | None:
    """The host's one-minute load average (None where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None
