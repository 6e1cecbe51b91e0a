"""ZeRO-1 over one flat parameter vector: who owns which slice, and how slices are re-cut.

Every trainer keeps the full model for forward and backward, but the fp32 master copy of the
parameters and the AdamW moments exist only as one contiguous slice per trainer rank. A resize
changes the number of ranks, so the slices are re-cut: `recut` assembles a new rank's slice from
the old ranks' slices that overlap it. Slicing and concatenation copy bits, never round, so moving
state to new ranks and back is bitwise lossless (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

OPTIMIZER_TENSORS = ("exp_avg", "exp_avg_sq")
"""The per-element AdamW state that lives in a trainer's shard, besides the master weights."""


@dataclass(frozen=True)
class ShardLayout:
    """Contiguous equal slices (the last ones shorter) of `numel` elements over `num_ranks`."""

    numel: int
    num_ranks: int

    def __post_init__(self) -> None:
        if self.numel < 1 or self.num_ranks < 1:
            raise ValueError("a shard layout needs at least one element and one rank")

    @property
    def padded_shard_numel(self) -> int:
        """Elements per rank after padding, so that all-gathers see equal sizes."""
        return -(-self.numel // self.num_ranks)

    def bounds(self, rank: int) -> tuple[int, int]:
        """Half-open [start, stop) of rank's slice of the flat vector."""
        if not 0 <= rank < self.num_ranks:
            raise IndexError(f"rank {rank} outside 0..{self.num_ranks - 1}")
        size = self.padded_shard_numel
        return min(rank * size, self.numel), min((rank + 1) * size, self.numel)

    def shard_numel(self, rank: int) -> int:
        start, stop = self.bounds(rank)
        return stop - start


@dataclass
class ShardState:
    """One rank's slice of the trainer state, on whatever device it currently lives."""

    rank: int
    layout: ShardLayout
    master: torch.Tensor
    """fp32 master weights of the slice."""
    moments: dict[str, torch.Tensor]
    """AdamW moments of the slice, keyed by OPTIMIZER_TENSORS."""
    optimizer_step: int
    """AdamW step count (the same on every rank)."""

    def to(self, device: torch.device | str) -> ShardState:
        return ShardState(
            rank=self.rank,
            layout=self.layout,
            master=self.master.to(device, copy=True),
            moments={k: v.to(device, copy=True) for k, v in self.moments.items()},
            optimizer_step=self.optimizer_step,
        )

    def nbytes(self) -> int:
        tensors = [self.master, *self.moments.values()]
        return sum(t.numel() * t.element_size() for t in tensors)


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    start, stop = max(a[0], b[0]), min(a[1], b[1])
    return (start, stop) if start < stop else None


def sources_of(old: ShardLayout, new: ShardLayout, new_rank: int) -> list[int]:
    """Old ranks whose slices overlap new_rank's slice: what that rank has to receive."""
    target = new.bounds(new_rank)
    return [r for r in range(old.num_ranks) if _overlap(old.bounds(r), target)]


def recut(old_shards: list[ShardState], new: ShardLayout, new_rank: int) -> ShardState:
    """Assemble new_rank's slice of layout `new` from the overlapping old slices.

    `old_shards` must contain every old rank listed by `sources_of` (others are ignored); all
    must share one layout and one optimizer step.
    """
    if not old_shards:
        raise ValueError("recut needs at least one old shard")
    old = old_shards[0].layout
    steps = {s.optimizer_step for s in old_shards}
    if any(s.layout != old for s in old_shards) or len(steps) != 1:
        raise ValueError("old shards disagree on layout or optimizer step")
    if old.numel != new.numel:
        raise ValueError(f"layouts cover {old.numel} and {new.numel} elements")
    by_rank = {s.rank: s for s in old_shards}
    target = new.bounds(new_rank)
    pieces: dict[str, list[torch.Tensor]] = {"master": [], **{k: [] for k in OPTIMIZER_TENSORS}}
    for rank in sources_of(old, new, new_rank):
        if rank not in by_rank:
            raise ValueError(f"recut of rank {new_rank} needs old rank {rank}'s shard")
        shard = by_rank[rank]
        start, stop = _overlap(old.bounds(rank), target)  # type: ignore[misc]
        offset = old.bounds(rank)[0]
        pieces["master"].append(shard.master[start - offset : stop - offset])
        for key in OPTIMIZER_TENSORS:
            pieces[key].append(shard.moments[key][start - offset : stop - offset])
    if not pieces["master"]:  # an empty slice (more ranks than elements at the end)
        template = old_shards[0]
        pieces = {"master": [template.master[:0]]}
        pieces.update({k: [template.moments[k][:0]] for k in OPTIMIZER_TENSORS})
    return ShardState(
        rank=new_rank,
        layout=new,
        master=torch.cat(pieces["master"]),
        moments={k: torch.cat(pieces[k]) for k in OPTIMIZER_TENSORS},
        optimizer_step=steps.pop(),
    )


def full_vectors(shards: list[ShardState]) -> dict[str, torch.Tensor]:
    """Concatenate every rank's slice into whole flat vectors (for checkpoints and tests)."""
    ordered = sorted(shards, key=lambda s: s.rank)
    if [s.rank for s in ordered] != list(range(ordered[0].layout.num_ranks)):
        raise ValueError("full_vectors needs exactly one shard per rank")
    out = {"master": torch.cat([s.master for s in ordered])}
    for key in OPTIMIZER_TENSORS:
        out[key] = torch.cat([s.moments[key] for s in ordered])
    return out


def shards_from_full(
    vectors: dict[str, torch.Tensor], layout: ShardLayout, *, optimizer_step: int
) -> list[ShardState]:
    """Cut whole flat vectors into one shard per rank of `layout` (checkpoint restore)."""
    shards = []
    for rank in range(layout.num_ranks):
        start, stop = layout.bounds(rank)
        shards.append(
            ShardState(
                rank=rank,
                layout=layout,
                master=vectors["master"][start:stop].clone(),
                moments={k: vectors[k][start:stop].clone() for k in OPTIMIZER_TENSORS},
                optimizer_step=optimizer_step,
            )
        )
    return shards
