"""The compiled pass that finishes a block of a synthetic workload (`synthetic_draw`): each
sample's length taken from its component's run of draws, scaled by its step's multiplier,
clipped and rounded to whole tokens, one sample at a time in one pass.

numpy does the same in several passes a chunk at a time (a scatter per component, the scaling,
two clips, the rounding); the values are the same to the bit: float32 products, the clips as
`fmax`/`fmin` take them (a NaN becomes the lower bound), round-half-even in float32, then the
conversion to int64. Kept at module level for numba's disk cache; importing this module
imports numba, which `synthetic_draw` does only for blocks large enough to repay its load.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def _whole_tokens(value, low, high):
    """`rint(fmin(fmax(value, low), high))` of one float32: a NaN takes the lower bound."""
    if not value >= low:  # below the bound, or NaN (as fmax takes it)
        value = low
    if value > high:
        value = high
    return np.rint(value)


@numba.njit(cache=True, nogil=True)
def finish_responses(which, drawn, starts, factors, per_step, low, high, out):
    """Response lengths of a block into `out` (int64, one per sample, in sample order).

    `which` (int8, one per sample) names each sample's component, whose draws are the run of
    `drawn` (float32) from `starts[component]` on, taken in order; an empty `which` means one
    component, `drawn` then in sample order. `factors` (float32, one per step of `per_step`
    samples) scales the lengths; empty: unscaled. `low` and `high` are float32 bounds.
    """
    taken = starts.copy()
    mixed = len(which) > 0
    scaled = len(factors) > 0
    for i in range(len(out)):
        if mixed:
            component = which[i]
            value = drawn[taken[component]]
            taken[component] += 1
        else:
            value = drawn[i]
        if scaled:
            value = value * factors[i // per_step]
        out[i] = _whole_tokens(value, low, high)


@numba.njit(cache=True, nogil=True)
def round_into(values, low, high, out):
    """Lengths (float32) clipped to [low, high] and rounded into `out` (int64), in one pass."""
    for i in range(len(out)):
        out[i] = _whole_tokens(values[i], low, high)
