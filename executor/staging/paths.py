"""Which path each move takes, the wires that carry the ones off shared memory, and their stats.

`TransferRoutes` is a pure function of the node of every worker and of whether same-node moves
go device to device (`LiveConfig.device_transfers`): every worker derives the same path for
every move without a message, and the driver derives the same one for the records.

- sender and receiver on different nodes: `network` (gloo over host buffers; NCCL when the run
  moves device to device);
- on one node, a GPU each and `staging.path` auto or device: `device` (NCCL send/recv);
- on one node otherwise: `shm`, the bounded shared-memory ring (the path of every single-node CPU
  run, unchanged).

`open_wires` creates the groups the routes need, on every worker in the same order (group
creation is a collective of the whole world): a gloo group for headers and answers (and for the
bytes on CPU), then an NCCL group when moves go device to device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from dynaresize.traces.phases import PhaseName, TransferPath

from .config import StagingConfig
from .device import nccl_wire
from .network import PointToPoint, Wire


@dataclass(frozen=True)
class TransferRoutes:
    """The node of every worker (by worker id) and whether same-node moves go device to device."""

    node_of_worker: tuple[str, ...]
    device_transfers: bool = False

    def same_node(self, a: int, b: int) -> bool:
        return self.node_of_worker[a] == self.node_of_worker[b]

    def path(self, src: int, dst: int) -> TransferPath:
        if not self.same_node(src, dst):
            return TransferPath.NETWORK
        return TransferPath.DEVICE if self.device_transfers else TransferPath.SHM

    @property
    def num_nodes(self) -> int:
        return len(set(self.node_of_worker))

    @property
    def needs_wires(self) -> bool:
        """Whether any move can leave shared memory (several nodes, or device transfers)."""
        return self.num_nodes > 1 or self.device_transfers


@dataclass(frozen=True)
class TransferStat:
    """One transfer as its receiver saw it (the executor's side of `traces.TransferRecord`)."""

    phase: PhaseName
    path: TransferPath
    src_worker: int
    dst_worker: int
    src_node: str
    dst_node: str
    num_bytes: int
    seconds: float


class Wires:
    """A worker's ends of the point-to-point wires: `network` across nodes, `device` between
    GPUs of one node (the NCCL wire serves both when the run moves device to device)."""

    def __init__(
        self,
        network: PointToPoint | None,
        device: PointToPoint | None,
        groups: list[dist.ProcessGroup],
    ) -> None:
        self._by_path = {TransferPath.NETWORK: network, TransferPath.DEVICE: device}
        self._groups = groups

    def for_path(self, path: TransferPath) -> PointToPoint:
        end = self._by_path.get(path)
        if end is None:
            raise RuntimeError(f"no wire for path {path.value} on this worker")
        return end

    def close(self) -> None:
        for group in self._groups:
            dist.destroy_process_group(group)
        self._groups.clear()
        self._by_path.clear()


def open_wires(
    routes: TransferRoutes,
    config: StagingConfig,
    *,
    world_size: int,
    device: torch.device,
) -> Wires | None:
    """The wires `routes` needs (None when every move stays in shared memory). Every worker
    calls it with the same routes: it creates process groups of the whole world."""
    if not routes.needs_wires:
        return None
    control = dist.new_group(list(range(world_size)), backend="gloo")
    assert control is not None, "every worker is a member"
    if routes.device_transfers:
        nccl = nccl_wire(world_size=world_size, device=device, timeout_s=config.peer_timeout_s)
        end = PointToPoint(config, control=control, data=nccl)
        return Wires(network=end, device=end, groups=[control, nccl.group])
    host = Wire(group=control, device=torch.device("cpu"))
    end = PointToPoint(config, control=control, data=host)
    return Wires(network=end, device=None, groups=[control])
