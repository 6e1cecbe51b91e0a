"""The worker's choice of path for each slice it sends or receives, and its log of transfers.

One of the live worker's method groups, used by the overlapped strategy's worker side: a slice
between two workers of one node goes through the receiver's shared-memory pool as before; one
between nodes goes over the network wire, and one between two GPUs of a node over the device
wire (`staging.paths`). Every transfer this worker receives is logged with its path, bytes and
seconds; the driver collects the log after each phase (`take_transfer_log`) for the records.
A re-cut's slices stream in lanes (`_start_sends`: one per destination on this node, one for
every slice off shared memory) and land in a new slice (`_receive_slices`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from dynaresize.traces.phases import PhaseName, TransferPath

from ..staging import StagingConfig, StagingPool, StagingSender, TransferStats
from ..staging.network import PointToPoint
from ..staging.paths import TransferRoutes, TransferStat, Wires, open_wires
from .slice_moves import SliceMove
from .state import WorkerState


@dataclass
class Sends:
    """Send threads started by one move, and what they report."""

    threads: list[threading.Thread] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    sent_bytes: list[int] = field(default_factory=list)

    def join(self) -> int:
        """Wait for every send; re-raise the first failure; bytes sent."""
        for thread in self.threads:
            thread.join()
        if self.errors:
            raise self.errors[0]
        return sum(self.sent_bytes)


class RoutedTransfers(WorkerState):
    """Sends and receives of single slices, each by the path its two workers' places dictate."""

    _staging_pool: StagingPool
    _staging_sender: StagingSender
    _routes: TransferRoutes | None = None
    _wires: Wires | None = None
    _transfer_log: list[TransferStat]

    def _open_routes(
        self, routes: TransferRoutes | None, staging: StagingConfig, *, world_size: int
    ) -> None:
        """Keep the routes and open the wires they need (every worker at once: group creation
        is a collective of the whole world)."""
        self._routes = routes
        self._transfer_log = []
        self._wires = (
            open_wires(routes, staging, world_size=world_size, device=self.device)
            if routes is not None
            else None
        )

    def _close_routes(self) -> None:
        if self._wires is not None:
            self._wires.close()
            self._wires = None

    def _reaches_by_shm(self, peer: int) -> bool:
        """Whether this worker and `peer` share a node (so `peer`'s pool can be mapped here)."""
        return self._routes is None or self._routes.same_node(self.worker_id, peer)

    def _path(self, move: SliceMove) -> TransferPath:
        if self._routes is None:
            return TransferPath.SHM
        return self._routes.path(move.src_worker, move.dst_worker)

    def _send_slice(
        self,
        move: SliceMove,
        tensors: Mapping[str, torch.Tensor],
        *,
        pools: dict[int, str],
        transfer_id: int,
    ) -> TransferStats:
        path = self._path(move)
        if path is TransferPath.SHM:
            return self._staging_sender.send(
                pools[move.dst_worker], tensors, transfer_id=transfer_id, sender_id=self.worker_id
            )
        return self._wire(path).send(move.dst_worker, tensors, transfer_id=transfer_id)

    def _receive_slice(
        self,
        move: SliceMove,
        views: Mapping[str, torch.Tensor],
        *,
        transfer_id: int,
        phase: PhaseName,
    ) -> TransferStats:
        path = self._path(move)
        if path is TransferPath.SHM:
            stats = self._staging_pool.receive_into(
                views, transfer_id=transfer_id, sender_id=move.src_worker
            )
        else:
            stats = self._wire(path).receive_into(move.src_worker, views, transfer_id=transfer_id)
        self._transfer_log.append(
            TransferStat(
                phase=phase,
                path=path,
                src_worker=move.src_worker,
                dst_worker=move.dst_worker,
                src_node=self._node(move.src_worker),
                dst_node=self._node(move.dst_worker),
                num_bytes=stats.num_bytes,
                seconds=stats.seconds,
            )
        )
        return stats

    def _start_sends(
        self,
        moves: list[SliceMove],
        pools: dict[int, str],
        transfer_ids: dict[int, int],
        source: dict[str, torch.Tensor],
        on_sent: Callable[[], None] | None,
    ) -> Sends:
        """One thread per destination worker on this node, each streaming its slices in plan
        order through that worker's pool; one more for every slice off shared memory, in plan
        order (the wires send one transfer at a time, and element order keeps every sender and
        every receiver taking their transfers in one global order, so none waits on another).
        `on_sent` is called by each lane when its last slice has left."""
        by_dst: dict[int, list[int]] = {}
        routed: list[int] = []
        for index, move in enumerate(moves):
            if move.src_worker == self.worker_id and not move.local:
                if self._path(move) is TransferPath.SHM:
                    by_dst.setdefault(move.dst_worker, []).append(index)
                else:
                    routed.append(index)
        sends = Sends()

        def run(indices: list[int]) -> None:
            try:
                for index in indices:
                    move = moves[index]
                    tensors = {
                        k: t[move.src_start : move.src_start + move.numel]
                        for k, t in source.items()
                    }
                    stats = self._send_slice(
                        move, tensors, pools=pools, transfer_id=transfer_ids[index]
                    )
                    sends.sent_bytes.append(stats.num_bytes)
                if on_sent is not None:
                    on_sent()
            except BaseException as exc:  # surfaced by the caller
                sends.errors.append(exc)

        lanes = {f"stage-send-{dst}": idx for dst, idx in by_dst.items()}
        if routed:
            lanes["stage-send-routed"] = routed
        sends.threads = [
            threading.Thread(target=run, args=(idx,), name=name, daemon=True)
            for name, idx in lanes.items()
        ]
        for thread in sends.threads:
            thread.start()
        return sends

    def _receive_slices(
        self,
        moves: list[SliceMove],
        transfer_ids: dict[int, int],
        into: dict[str, torch.Tensor],
        local_source: dict[str, torch.Tensor] | None,
        *,
        phase: PhaseName,
    ) -> int:
        """Fill this worker's new slice: local overlaps by a device copy, the rest staged (by
        each move's path), logged as transfers of `phase`."""
        received = 0
        for index, move in enumerate(moves):
            if move.dst_worker != self.worker_id:
                continue
            views = {k: t[move.dst_start : move.dst_start + move.numel] for k, t in into.items()}
            if move.local:
                assert local_source is not None, "a local move needs the held shard"
                for key, view in views.items():
                    start = move.src_start
                    view.copy_(local_source[key][start : start + move.numel])
                continue
            stats = self._receive_slice(move, views, transfer_id=transfer_ids[index], phase=phase)
            received += stats.num_bytes
        return received

    def _wire(self, path: TransferPath) -> PointToPoint:
        if self._wires is None:
            raise RuntimeError(f"worker {self.worker_id} has no wire for a {path.value} move")
        return self._wires.for_path(path)

    def _node(self, worker_id: int) -> str:
        return self._routes.node_of_worker[worker_id] if self._routes is not None else ""

    def take_transfer_log(self) -> list[TransferStat]:
        """The transfers this worker received since the last call (the driver records them)."""
        log = getattr(self, "_transfer_log", [])
        self._transfer_log = []
        return log
