"""A replica fingerprints its model in place (`parameters_digest`) and the trainer a flat copy
(`weights_digest`): both must give the same digest for the same weights, whatever the split into
parameters and the sample stride, or the lineage and sync checks would fail on honest runs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dynaresize.executor.rl.weights_digest import parameters_digest, weights_digest  # noqa: E402


@pytest.mark.parametrize("sizes", [[1], [7, 3], [5, 1, 1, 11], [64, 0, 31]])
@pytest.mark.parametrize("sample_elements", [1, 3, 8, 1 << 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_in_place_and_flat_digests_agree(sizes, sample_elements, dtype):
    generator = torch.Generator().manual_seed(sum(sizes) + sample_elements)
    parts = [torch.randn(n, generator=generator).to(dtype) for n in sizes]
    flat = torch.cat(parts)
    assert parameters_digest(parts, sample_elements=sample_elements) == weights_digest(
        flat, sample_elements=sample_elements
    )


def test_a_changed_sampled_weight_changes_the_digest():
    parts = [torch.zeros(10), torch.zeros(6)]
    before = parameters_digest(parts, sample_elements=4)
    parts[0][8] = 1.0  # element 8 of 16: on the sample grid of stride 4 (0, 4, 8, 12)
    assert parameters_digest(parts, sample_elements=4) != before
