"""The veRL presets meet veRL's published changes within 3 points (docs/verl-presets.md), and
their fitted parameters are what benchmarks/fit_verl_presets.py finds. Their records are pinned
cell for cell by the backtests (backtest_cases.py)."""

from __future__ import annotations

import pytest
from bench_scripts import load_script
from twin_scenarios import shipped_scenario

from dynaresize.twin.simulation import build_context, simulate


@pytest.fixture(scope="module")
def script():
    return load_script("fit_verl_presets")


def _lending_change(name: str, against: str) -> float:
    config = shipped_scenario(name)
    context = build_context(config)
    total = simulate(config, config.policies[0], context=context).summary.total_s
    return total / context.baselines.totals_s[against] - 1.0


@pytest.mark.parametrize(
    ("preset", "against", "published"),
    [
        ("verl_drc", "8:24", -0.153),  # the best static split
        ("verl_drc", "16:16", -0.175),
        ("verl_switch", "16:8", -0.126),  # no switch on the same split
    ],
)
def test_lending_change_is_within_three_points_of_verls(preset, against, published):
    assert abs(_lending_change(preset, against) - published) <= 0.03


def test_the_drc_presets_static_best_split_is_8_24_as_in_verls_runs():
    context = build_context(shipped_scenario("verl_drc"))
    assert context.baselines.best_allocation == "8:24"


def test_the_drc_presets_fitted_parameters_are_what_the_fit_script_finds(script):
    preset = script.PRESETS["verl_drc"]
    decode, per_token = script.fit(preset, preset.mapping())
    costs = shipped_scenario("verl_drc").costs
    assert script.four_digits(decode) == costs.rollout.decode_s_per_active_seq
    assert script.four_digits(per_token) == costs.train.s_per_token_one_gpu


def test_the_switch_presets_fitted_parameters_put_both_totals_on_verls(script):
    """Its fit runs the lending simulation a dozen times; here the fitted point is checked:
    the shipped parameters give both published totals (within their four digits)."""
    config = shipped_scenario("verl_switch")
    context = build_context(config)
    static_h = context.baselines.totals_s["16:8"] / 3600
    switch_h = simulate(config, config.policies[0], context=context).summary.total_s / 3600
    assert static_h == pytest.approx(18.80, rel=2e-3)
    assert switch_h == pytest.approx(16.43, rel=5e-3)
