"""The trace's clock rounds microseconds as Python's `round(v, 3)` does, value for value: ties,
values near a tie, huge values and non-finite ones included."""

from __future__ import annotations

import math

import numpy as np

from dynaresize.traces.chrome_events import rounded


def _same_as_round(values: np.ndarray) -> None:
    got = rounded(values)
    for value, mine in zip(values.tolist(), got.tolist(), strict=True):
        want = round(value, 3)
        if math.isnan(want):
            assert math.isnan(mine)
        else:
            assert repr(mine) == repr(want), f"round({value!r}, 3)"


def test_rounding_matches_python_on_random_clocks():
    rng = np.random.default_rng(29)
    spans = [1e-3, 1.0, 1e3, 1e6, 1e9, 1e12, 1e15, 1e18]
    values = np.concatenate([rng.uniform(-s, s, 20_000) for s in spans])
    _same_as_round(values)


def test_rounding_matches_python_at_ties_and_edges():
    halves = (
        np.arange(-5_000, 5_000) + 0.5
    ) / 1000.0  # k.5 thousandths: ties, as doubles hold them
    near = np.concatenate([np.nextafter(halves, np.inf), np.nextafter(halves, -np.inf)])
    edges = np.array([0.0, -0.0, 2.675, 1.0005, 2.0**52 / 1000, 2.0**53, np.inf, -np.inf, np.nan])
    _same_as_round(np.concatenate([halves, near, edges, halves * 1e6 + 0.0005]))
