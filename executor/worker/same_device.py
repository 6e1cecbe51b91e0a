"""The collectives of trainers that share one GPU, device to device through CUDA IPC.

NCCL cannot join two ranks on one device, and the host path (gloo over copies in host memory)
makes every step of 2-3 trainers on one GPU pay two device -> host -> device round trips of the
whole fp32 gradient plus gloo's sums on the CPU: seconds per step where the compute takes one.
Here every rank owns one fp32 staging buffer on the device and maps every other rank's through
its CUDA IPC handle; gloo carries only the handles (once per group) and the barriers. A reduce
then reads the peers' buffers on the device, and every rank adds them in rank order, so all
ranks hold bitwise the same sum (as a collective must: each rank clips and steps on it).

Each rank's buffer is written only by that rank, and read by the others only between two
barriers, after the writer has synchronised its stream; a rank writes again only after the
barrier that ends the readers' last read.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..engines.device_share import SharedDeviceTensor, open_shared, share


class IpcRefused(RuntimeError):
    """Some rank of the group could not map a peer's buffer (the reason names the rank)."""


class SameDeviceExchange:
    """The staging buffers of one trainer group on one GPU: this rank's own and its mappings of
    the peers', `numel` fp32 elements each (the group's padded flat buffer).

    Built collectively (every rank of `group` at once); raises `IpcRefused` on every rank when
    any rank fails to map a peer's buffer, so that no rank waits at a barrier alone."""

    def __init__(
        self,
        group: dist.ProcessGroup | None,
        *,
        rank: int,
        numel: int,
        device: torch.device,
    ) -> None:
        self.group = group
        self.rank = rank
        num_ranks = dist.get_world_size(group)
        own = torch.empty(numel, dtype=torch.float32, device=device)
        handles: list[SharedDeviceTensor | None] = [None] * num_ranks
        dist.all_gather_object(handles, share(own), group=group)
        buffers: list[torch.Tensor] = []
        problem = ""
        for peer, handle in enumerate(handles):
            if peer == rank:
                buffers.append(own)
                continue
            try:
                assert handle is not None
                buffers.append(open_shared(handle))
            except Exception as err:  # reported to every rank below
                problem = f"rank {rank} could not map rank {peer}'s buffer: {err}"
                break
        problems: list[str] = [""] * num_ranks
        dist.all_gather_object(problems, problem, group=group)
        refused = [p for p in problems if p]
        if refused:
            raise IpcRefused("; ".join(refused))
        self.buffers = buffers

    @property
    def own(self) -> torch.Tensor:
        return self.buffers[self.rank]

    def _publish(self) -> None:
        """This rank's writes are complete on the device, and every rank's are."""
        torch.cuda.current_stream(self.own.device).synchronize()
        dist.barrier(group=self.group)

    def all_reduce_(self, flat: torch.Tensor) -> None:
        """Sum `flat` (at most the buffer's size) over the group, in place, in rank order."""
        n = flat.numel()
        self.own[:n].copy_(flat.reshape(-1))
        self._publish()
        out = flat.reshape(-1)
        out.copy_(self.buffers[0][:n])
        for peer_buffer in self.buffers[1:]:
            out.add_(peer_buffer[:n])
        self._publish()  # every rank has read every buffer: they may be written again

    def all_gather_(self, padded: torch.Tensor, *, rank: int) -> None:
        """Fill `padded` (num_ranks equal chunks) from every rank's own chunk."""
        size = padded.numel() // len(self.buffers)
        lo, hi = rank * size, (rank + 1) * size
        self.own[lo:hi].copy_(padded[lo:hi])
        self._publish()
        for peer, peer_buffer in enumerate(self.buffers):
            if peer != rank:
                chunk = slice(peer * size, (peer + 1) * size)
                padded[chunk].copy_(peer_buffer[chunk])
        self._publish()

    def close(self) -> None:
        """Drop the mappings and this rank's buffer (the group is being left)."""
        self.buffers = []
        torch.cuda.ipc_collect()
