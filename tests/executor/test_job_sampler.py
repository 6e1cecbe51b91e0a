"""The prompt order: seeded shuffles per epoch, full batches, a position that restores exactly."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaresize.config_io import ConfigError
from dynaresize.executor.job.prompt_sampler import PromptSampler, SamplerPosition, SamplerStateError


def draw(sampler: PromptSampler, num_batches: int) -> list[list[int]]:
    return [sampler.next_batch() for _ in range(num_batches)]


def test_each_epoch_is_a_fresh_permutation_with_the_remainder_skipped():
    sampler = PromptSampler(10, batch_size=3, seed=7)
    assert sampler.batches_per_epoch == 3
    batches = draw(sampler, 9)
    for epoch in range(3):
        rows = [i for batch in batches[3 * epoch : 3 * epoch + 3] for i in batch]
        assert len(set(rows)) == 9  # no prompt twice in an epoch
        assert rows == list(sampler.order(epoch)[:9])  # consecutive slices of the order
    assert list(sampler.order(0)) != list(sampler.order(1))
    assert sampler.position == SamplerPosition(epoch=2, index=9)


def test_same_seed_same_order_other_seed_other_order():
    first = draw(PromptSampler(50, batch_size=4, seed=3), 30)
    assert draw(PromptSampler(50, batch_size=4, seed=3), 30) == first
    assert draw(PromptSampler(50, batch_size=4, seed=4), 30) != first


def test_without_shuffle_the_file_order_repeats():
    batches = draw(PromptSampler(5, batch_size=2, seed=0, shuffle=False), 4)
    assert batches == [[0, 1], [2, 3], [0, 1], [2, 3]]


@settings(max_examples=60, deadline=None)
@given(
    num_rows=st.integers(1, 40),
    batch_size=st.integers(1, 12),
    seed=st.integers(0, 2**31),
    stop_after=st.integers(0, 25),
)
def test_a_restored_sampler_continues_with_the_next_batch(num_rows, batch_size, seed, stop_after):
    if num_rows < batch_size:
        return
    uninterrupted = PromptSampler(num_rows, batch_size=batch_size, seed=seed, fingerprint="f")
    expected = draw(uninterrupted, stop_after + 5)

    crashed = PromptSampler(num_rows, batch_size=batch_size, seed=seed, fingerprint="f")
    draw(crashed, stop_after)
    saved = json.loads(json.dumps(crashed.state_dict()))  # as it travels in a checkpoint
    resumed = PromptSampler(num_rows, batch_size=batch_size, seed=seed, fingerprint="f")
    resumed.load_state_dict(saved)
    assert draw(resumed, 5) == expected[stop_after:]


@pytest.mark.parametrize(
    ("name", "other"),
    [("num_rows", 11), ("batch_size", 2), ("seed", 8), ("shuffle", False), ("fingerprint", "g")],
)
def test_a_position_saved_for_other_data_or_settings_is_refused(name, other):
    base = {"num_rows": 10, "batch_size": 3, "seed": 7, "shuffle": True, "fingerprint": "f"}
    saved = PromptSampler(**base).state_dict()
    other_run = PromptSampler(**{**base, name: other})
    with pytest.raises(SamplerStateError, match=rf"{name}={saved[name]!r}.*has {name}={other!r}"):
        other_run.load_state_dict(saved)


def test_fewer_prompts_than_a_batch_is_a_config_error():
    with pytest.raises(ConfigError, match=r"3 prompts are left.*fewer than the 4 prompts"):
        PromptSampler(3, batch_size=4, seed=0)
