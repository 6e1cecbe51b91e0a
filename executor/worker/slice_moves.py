"""Which slice of which old trainer shard goes to which new trainer shard on a resize.

ZeRO-1 keeps one contiguous slice of the flat parameter vector per trainer rank; a resize re-cuts
the slices. A `SliceMove` is one overlap of an old rank's slice with a new rank's slice: the bytes
a worker sends to another (or copies locally when both ranks live on the same worker). The moves
for a new rank cover its slice exactly once, in order (a property test checks it), which is what
lets both sides of a staged transfer agree on the bytes without sending any layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..roles import RoleMap
from .shards import ShardLayout, sources_of


@dataclass(frozen=True)
class SliceMove:
    """Elements [src_start, src_start + numel) of the old shard on `src_worker` become elements
    [dst_start, dst_start + numel) of the new shard on `dst_worker`."""

    src_worker: int
    dst_worker: int
    src_start: int
    dst_start: int
    numel: int

    @property
    def local(self) -> bool:
        return self.src_worker == self.dst_worker


def reshard_moves(old: RoleMap, new: RoleMap, *, numel: int) -> list[SliceMove]:
    """Every overlap between old and new trainer slices, grouped by new rank, in element order."""
    old_layout = ShardLayout(numel=numel, num_ranks=old.num_trainers)
    new_layout = ShardLayout(numel=numel, num_ranks=new.num_trainers)
    moves = []
    for new_rank, dst_worker in enumerate(new.trainer_ids):
        lo, hi = new_layout.bounds(new_rank)
        for old_rank in sources_of(old_layout, new_layout, new_rank):
            old_lo, old_hi = old_layout.bounds(old_rank)
            start, stop = max(lo, old_lo), min(hi, old_hi)
            moves.append(
                SliceMove(
                    src_worker=old.trainer_ids[old_rank],
                    dst_worker=dst_worker,
                    src_start=start - old_lo,
                    dst_start=start - lo,
                    numel=stop - start,
                )
            )
    return moves


def staged_bytes(moves: list[SliceMove], *, bytes_per_element: int) -> int:
    """Bytes that cross between workers (local moves stay on the device)."""
    return sum(m.numel for m in moves if not m.local) * bytes_per_element
