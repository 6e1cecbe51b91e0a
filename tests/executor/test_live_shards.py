"""ZeRO-1 slices of the flat parameter vector: layouts partition it, and re-cutting state to a new
number of ranks and back is bitwise lossless for the master weights and every AdamW tensor."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaresize.executor.worker.shards import (
    OPTIMIZER_TENSORS,
    ShardLayout,
    full_vectors,
    recut,
    shards_from_full,
    sources_of,
)


def _vectors(numel: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "master": torch.randn(numel, generator=gen),
        # tiny and huge magnitudes: any rounding on the way would show
        "exp_avg": torch.randn(numel, generator=gen) * 1e-30,
        "exp_avg_sq": torch.rand(numel, generator=gen) * 1e30,
    }


@settings(max_examples=200, deadline=None)
@given(numel=st.integers(1, 500), num_ranks=st.integers(1, 9))
def test_layout_slices_partition_the_vector(numel: int, num_ranks: int) -> None:
    layout = ShardLayout(numel=numel, num_ranks=num_ranks)
    covered = []
    for rank in range(num_ranks):
        lo, hi = layout.bounds(rank)
        assert 0 <= lo <= hi <= numel
        assert hi - lo <= layout.padded_shard_numel
        covered.extend(range(lo, hi))
    assert covered == list(range(numel))


@settings(max_examples=150, deadline=None)
@given(
    numel=st.integers(1, 300),
    ranks=st.lists(st.integers(1, 6), min_size=2, max_size=5),
    seed=st.integers(0, 10_000),
)
def test_recut_through_any_sequence_of_rank_counts_and_back_is_bitwise(numel, ranks, seed) -> None:
    vectors = _vectors(numel, seed)
    shards = shards_from_full(vectors, ShardLayout(numel, ranks[0]), optimizer_step=7)
    for num_ranks in [*ranks[1:], ranks[0]]:
        new = ShardLayout(numel, num_ranks)
        shards = [recut(shards, new, rank) for rank in range(num_ranks)]
    back = full_vectors(shards)
    for key in ("master", *OPTIMIZER_TENSORS):
        assert torch.equal(back[key].view(torch.int32), vectors[key].view(torch.int32)), key
    assert {s.optimizer_step for s in shards} == {7}


@settings(max_examples=100, deadline=None)
@given(numel=st.integers(1, 200), old_ranks=st.integers(1, 6), new_ranks=st.integers(1, 6))
def test_a_new_rank_needs_exactly_the_old_ranks_that_overlap_it(numel, old_ranks, new_ranks):
    old, new = ShardLayout(numel, old_ranks), ShardLayout(numel, new_ranks)
    for rank in range(new_ranks):
        lo, hi = new.bounds(rank)
        needed = {r for r in range(old_ranks) for i in range(*old.bounds(r)) if lo <= i < hi}
        assert set(sources_of(old, new, rank)) == needed


def test_recut_refuses_missing_sources_and_mixed_steps() -> None:
    vectors = _vectors(10, 0)
    shards = shards_from_full(vectors, ShardLayout(10, 2), optimizer_step=1)
    with pytest.raises(ValueError, match="needs old rank 1"):
        recut(shards[:1], ShardLayout(10, 1), 0)
    shards[1].optimizer_step = 2
    with pytest.raises(ValueError, match="optimizer step"):
        recut(shards, ShardLayout(10, 1), 0)
