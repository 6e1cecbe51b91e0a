"""Synthetic workloads: determinism, clipping, drift, regime switches and the presets' shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaresize.traces.synthetic import (
    PRESETS,
    LengthComponent,
    RegimeSwitch,
    WorkloadConfig,
    generate_workload,
    preset,
    workload_blocks,
)


def constant(name: str, tokens: float, weight: float = 1.0) -> LengthComponent:
    """A component whose every sample has exactly `tokens` tokens (lognormal with sigma 0)."""
    return LengthComponent(name=name, weight=weight, median_tokens=tokens, sigma=0.0)


def test_same_seed_same_workload_and_other_seed_differs():
    cfg = preset("high_variance")
    a, b = generate_workload(cfg, 20, 7), generate_workload(cfg, 20, 7)
    assert np.array_equal(a.response_tokens, b.response_tokens)
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens)
    c = generate_workload(cfg, 20, 8)
    assert not np.array_equal(a.response_tokens, c.response_tokens)


def test_regime_switch_reweights_the_mixture_exactly():
    cfg = WorkloadConfig(
        samples_per_step=50,
        components=[constant("short", 100), constant("long", 1000, weight=1e-12)],
        max_response_tokens=10_000,
        regime_switches=[RegimeSwitch(at_step=5, component_weights=[0.0, 1.0])],
    )
    w = generate_workload(cfg, 10, 0)
    before, after = w.response_tokens[: 5 * 50], w.response_tokens[5 * 50 :]
    assert np.all(before == 100)
    assert np.all(after == 1000)


def test_growth_compounds_then_plateaus_and_clipping_holds():
    cfg = WorkloadConfig(
        samples_per_step=4,
        components=[constant("only", 100)],
        max_response_tokens=150,
        length_growth_per_step=0.1,
        length_growth_stop_step=3,
    )
    w = generate_workload(cfg, 8, 0)
    per_step = w.response_tokens.reshape(8, 4)[:, 0]
    # 100 * 1.1**k until step 3, then flat; clipped at 150 (1.1**3 * 100 = 133.1).
    assert per_step.tolist() == [100, 110, 121, 133, 133, 133, 133, 133]
    scaled = cfg.model_copy(update={"length_growth_per_step": 0.5})
    assert generate_workload(scaled, 8, 0).response_tokens.max() == 150


def test_pareto_component_has_the_configured_median():
    cfg = WorkloadConfig(
        samples_per_step=20_000,
        components=[
            LengthComponent(weight=1, distribution="pareto", median_tokens=800, tail_index=1.3)
        ],
        max_response_tokens=10**7,
    )
    lengths = generate_workload(cfg, 1, 1).response_tokens
    assert abs(np.median(lengths) / 800 - 1) < 0.03
    assert lengths.min() >= 800 * 2 ** (-1 / 1.3) - 1


def test_presets_order_by_tail_weight():
    def tail_ratio(name: str) -> float:
        r = generate_workload(PRESETS[name], 20, 0).response_tokens
        return np.percentile(r, 99) / np.percentile(r, 50)

    assert tail_ratio("high_variance") > 3 * tail_ratio("low_variance")
    with pytest.raises(ValueError, match="unknown workload preset"):
        preset("nope")


def test_bad_regime_weights_are_rejected():
    with pytest.raises(ValueError, match="component_weights"):
        WorkloadConfig(
            samples_per_step=1,
            components=[constant("a", 1)],
            max_response_tokens=10,
            regime_switches=[RegimeSwitch(at_step=1, component_weights=[1.0, 2.0])],
        )


@settings(max_examples=40, deadline=None)
@given(
    steps=st.integers(0, 6),
    per_step=st.integers(1, 40),
    seed=st.integers(0, 2**31),
    growth=st.floats(-0.2, 0.3),
    sigma=st.floats(0, 2),
    max_len=st.integers(1, 5000),
)
def test_any_config_gives_a_valid_workload(steps, per_step, seed, growth, sigma, max_len):
    cfg = WorkloadConfig(
        samples_per_step=per_step,
        components=[
            LengthComponent(weight=2, median_tokens=300, sigma=sigma),
            LengthComponent(weight=1, distribution="pareto", median_tokens=900, tail_index=1.1),
        ],
        max_response_tokens=max_len,
        min_response_tokens=min(1, max_len),
        length_growth_per_step=growth,
    )
    w = generate_workload(cfg, steps, seed)
    assert w.num_steps == steps
    assert len(w.response_tokens) == steps * per_step
    if len(w.response_tokens):
        assert w.response_tokens.max() <= max_len
        assert w.response_tokens.min() >= cfg.min_response_tokens
        assert w.prompt_tokens.min() >= 1


def test_each_sample_comes_from_its_component_in_the_configured_shares():
    # Three constant components: a sample's length names the component it was drawn from.
    cfg = WorkloadConfig(
        samples_per_step=2_000,
        components=[constant("a", 100, 0.5), constant("b", 200, 0.3), constant("c", 400, 0.2)],
        max_response_tokens=1_000,
        regime_switches=[RegimeSwitch(at_step=2, component_weights=[0.1, 0.1, 0.8])],
    )
    lengths = generate_workload(cfg, 4, 11).response_tokens.reshape(4, 2_000)
    assert set(np.unique(lengths)) == {100, 200, 400}
    for step, weights in enumerate([[0.5, 0.3, 0.2]] * 2 + [[0.1, 0.1, 0.8]] * 2):
        shares = [np.mean(lengths[step] == value) for value in (100, 200, 400)]
        # five binomial standard deviations at 2,000 samples
        assert np.allclose(shares, weights, atol=5 * np.sqrt(0.25 / 2_000))


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("block_samples", [1, 700, 10_000])
def test_blocks_are_the_whole_workload_a_block_of_steps_at_a_time(name, block_samples):
    """Block by block, the numbers of the one-seed draw: the same samples in the same order."""
    cfg = preset(name).model_copy(update={"samples_per_step": 64})
    steps = 53
    whole = generate_workload(cfg, steps, 11)
    blocks = list(workload_blocks(cfg, steps, 11, block_samples=block_samples))
    per_block = max(1, block_samples // cfg.samples_per_step)
    assert [first for first, _ in blocks] == list(range(0, steps, per_block))
    assert all(block.num_steps == min(per_block, steps - first) for first, block in blocks)
    for field in ("prompt_tokens", "response_tokens"):
        joined = np.concatenate([getattr(block, field) for _, block in blocks])
        assert np.array_equal(joined, getattr(whole, field))
    assert list(workload_blocks(cfg, 0, 11)) == []
