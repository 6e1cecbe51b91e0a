"""The compiled pass that finishes large synthetic blocks gives numpy's passes' values exactly.

Each workload is drawn twice from its seed: with DYNARESIZE_NO_NUMBA=1 (numpy's passes, the
reference) and with the compiled pass forced for every block, however small. The configs are
the awkward ones: one component and several, a component no sample picks, growth and regime
switches, multipliers past float32 (infinities, and NaN where they meet an underflowed zero),
a zero lower bound, single-sample steps and blocks cut mid-run.
"""

from __future__ import annotations

import numpy as np
import pytest

from dynaresize.traces import synthetic_draw
from dynaresize.traces.numba_switch import NO_NUMBA_ENV
from dynaresize.traces.synthetic import PRESETS, WorkloadConfig, generate_workload, workload_blocks

AWKWARD: dict[str, dict] = {
    "one_component": {
        "samples_per_step": 7,
        "components": [{"weight": 1, "median_tokens": 40, "sigma": 1.5}],
        "max_response_tokens": 300,
    },
    "three_components_one_never_drawn": {
        "samples_per_step": 33,
        "components": [
            {"weight": 1, "median_tokens": 20},
            {"weight": 1e-12, "median_tokens": 5000},
            {"weight": 2, "distribution": "pareto", "median_tokens": 400, "tail_index": 0.7},
        ],
        "max_response_tokens": 4096,
        "min_response_tokens": 0,
    },
    "growth_and_switches": {
        "samples_per_step": 5,
        "components": [
            {"weight": 3, "median_tokens": 80},
            {"weight": 1, "distribution": "pareto", "median_tokens": 900, "tail_index": 1.1},
        ],
        "max_response_tokens": 20000,
        "length_growth_per_step": 0.3,
        "regime_switches": [
            {"at_step": 3, "length_scale": 0.01, "component_weights": [0.1, 0.9]},
            {"at_step": 9, "length_scale": 1e6},
        ],
    },
    "multipliers_past_float32": {
        "samples_per_step": 1,
        "components": [{"weight": 1, "median_tokens": 1e-30, "sigma": 30.0}],
        "max_response_tokens": 1000,
        "min_response_tokens": 0,
        "length_growth_per_step": 1e10,
    },
}


def _both_ways(monkeypatch, draw):
    """`draw()` with numpy's passes, then with the compiled pass for every block."""
    monkeypatch.setenv(NO_NUMBA_ENV, "1")
    reference = draw()
    monkeypatch.delenv(NO_NUMBA_ENV)
    monkeypatch.setattr(synthetic_draw, "COMPILED_MIN_SAMPLES", 0)
    return reference, draw()


@pytest.mark.parametrize("name", [*AWKWARD, *PRESETS])
def test_the_compiled_finish_equals_numpy_s(monkeypatch, name):
    config = (
        PRESETS[name]
        if name in PRESETS
        else WorkloadConfig.model_validate({"name": name, **AWKWARD[name]})
    )
    reference, compiled = _both_ways(monkeypatch, lambda: generate_workload(config, 23, seed=5))
    np.testing.assert_array_equal(compiled.response_tokens, reference.response_tokens)
    np.testing.assert_array_equal(compiled.prompt_tokens, reference.prompt_tokens)
    np.testing.assert_array_equal(compiled.step_offsets, reference.step_offsets)


def test_blocks_cut_mid_run_finish_alike(monkeypatch):
    config = WorkloadConfig.model_validate(AWKWARD["growth_and_switches"])

    def blocks():
        return list(workload_blocks(config, 40, seed=1, block_samples=17))

    reference, compiled = _both_ways(monkeypatch, blocks)
    assert [first for first, _ in compiled] == [first for first, _ in reference]
    for (_, want), (_, got) in zip(reference, compiled, strict=True):
        np.testing.assert_array_equal(got.response_tokens, want.response_tokens)
        np.testing.assert_array_equal(got.prompt_tokens, want.prompt_tokens)


def test_the_compiled_rounding_takes_nan_and_infinities_as_numpy_does():
    from dynaresize.traces import synthetic_numba

    values = np.array(
        [np.nan, np.inf, -np.inf, -0.0, 0.5, 1.5, 2.5, 2.4999998, 7.5, 1e30, -3.0, 3.0],
        dtype=np.float32,
    )
    want = np.empty(len(values), dtype=np.int64)
    synthetic_draw._round_into(want, values.copy(), 0, 7)
    got = np.empty(len(values), dtype=np.int64)
    synthetic_numba.round_into(values, np.float32(0), np.float32(7), got)
    np.testing.assert_array_equal(got, want)


def test_small_blocks_stay_in_numpy_and_the_switch_turns_the_compiled_pass_off(monkeypatch):
    large = synthetic_draw.COMPILED_MIN_SAMPLES
    monkeypatch.delenv(NO_NUMBA_ENV, raising=False)
    assert not synthetic_draw.compiled_finish(large - 1)
    assert synthetic_draw.compiled_finish(large)
    monkeypatch.setenv(NO_NUMBA_ENV, "1")
    assert not synthetic_draw.compiled_finish(large)
