"""Which path each replica's weights take at a weight sync, decided once per replica.

On one node with CUDA the first trainer publishes every weights version in a device buffer
(`device_weights.py`). A replica that maps that buffer loads from it, device to device; a replica
that cannot (another node, the trainer's device not visible to it, an IPC open that failed) gets
the weights as a host vector over the sync group, the network path every replica takes across
nodes and on CPU. Both paths serve their replicas in the same sync: a replica that cannot map the
buffer never sends the others to the network.

When a replica decides: the first time it sees a buffer (at setup, or at the first sync after it
joins Rollout), and it keeps the outcome for that buffer (`ReplicaPaths`), so a replica that
failed is not tried again at every sync. It is tried again for another buffer only: a resize that
makes another worker the first trainer publishes from that worker's device, and a worker started
anew (the stop-and-rebuild strategy, where a new process may sit on another device or node)
starts with nothing decided. A worker process keeps its device and node for its life, so nothing
else can change the outcome.

The publishing trainer learns every replica's path (`SyncPlan`, from one small all-gather per
sync) and sends the host vector only to those on the network path. Nothing here imports torch:
the decision is tested on CPU, where CUDA IPC cannot run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum


class SyncPath(str, Enum):
    """How one replica receives a weights version."""

    DEVICE = "cuda_ipc"
    """From the publishing trainer's device buffer, mapped by CUDA IPC handle."""
    NETWORK = "network"
    """As a host vector sent over the sync group (gloo)."""


@dataclass(frozen=True)
class MapOutcome:
    """What one replica's attempt to map a buffer gave."""

    path: SyncPath
    reason: str = ""
    """Why the buffer could not be mapped (empty on the device path)."""


@dataclass
class ReplicaPaths:
    """One replica's decided paths, by the key of the buffer each decision was made for."""

    outcomes: dict[str, MapOutcome] = field(default_factory=dict)
    attempts: int = 0
    """Mapping attempts made so far (one per buffer seen, whatever the number of syncs)."""

    def decide(self, buffer_key: str, try_map: Callable[[], str | None]) -> MapOutcome:
        """The path for `buffer_key`: decided by `try_map` (None when it mapped the buffer, else
        why not) the first time this key is seen, remembered after."""
        outcome = self.outcomes.get(buffer_key)
        if outcome is None:
            self.attempts += 1
            reason = try_map()
            outcome = (
                MapOutcome(SyncPath.DEVICE)
                if reason is None
                else MapOutcome(SyncPath.NETWORK, reason or "the buffer could not be mapped")
            )
            self.outcomes[buffer_key] = outcome
        return outcome


@dataclass(frozen=True)
class SyncPlan:
    """One sync's paths: the source, and each replica's own path."""

    source: int
    paths: Mapping[int, SyncPath]
    """Replica worker id -> its path (the source is no replica)."""

    @classmethod
    def of(cls, source: int, members: Iterable[tuple[int, SyncPath | None]]) -> SyncPlan:
        """The plan from every member's (worker id, path), as gathered over the sync group; the
        source says None. Raises ValueError on a member listed twice or a source with a path."""
        paths: dict[int, SyncPath] = {}
        seen: set[int] = set()
        for worker, path in members:
            if worker in seen:
                raise ValueError(f"worker {worker} answered twice in one weight sync")
            seen.add(worker)
            if worker == source:
                if path is not None:
                    raise ValueError(f"the source {source} of a weight sync took a path ({path})")
                continue
            if path is None:
                raise ValueError(f"replica {worker} of a weight sync has no path")
            paths[worker] = SyncPath(path)
        if source not in seen:
            raise ValueError(f"the source {source} is not among the weight sync's members")
        return cls(source=source, paths=dict(sorted(paths.items())))

    def replicas_on(self, path: SyncPath) -> tuple[int, ...]:
        return tuple(w for w, p in self.paths.items() if p is path)

    @property
    def all_network(self) -> bool:
        """Every replica takes the network path (the whole group joins one broadcast)."""
        return all(p is SyncPath.NETWORK for p in self.paths.values())

    def counts(self) -> dict[str, int]:
        """Replicas per path, every path named (0 where none took it)."""
        return {path.value: len(self.replicas_on(path)) for path in SyncPath}


def count_paths(results: Mapping[int, Mapping[str, object]]) -> dict[str, int]:
    """Replicas per path from every member's sync result (each replica names its `path`)."""
    counts = {path.value: 0 for path in SyncPath}
    for result in results.values():
        if not result.get("source"):
            counts[SyncPath(result["path"]).value] += 1
    return counts


def path_note(counts: Mapping[str, int]) -> str:
    """The trace note on how the replicas received the weights at the first sync."""
    device = counts.get(SyncPath.DEVICE.value, 0)
    network = counts.get(SyncPath.NETWORK.value, 0)
    return (
        f"weight sync: {device} replica(s) load from the first trainer's device buffer (CUDA "
        f"IPC), {network} receive a host vector over the network; each replica's path is decided "
        "when it first maps a trainer's buffer and kept (weights.jsonl counts every sync)"
    )
