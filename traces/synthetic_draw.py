"""The numbers of one block of a synthetic workload: its draws, in the one-seed order, and the
finishing of its samples' lengths into whole tokens.

Apart from `synthetic.py` (the configs, the presets and the order of blocks) so that each reads
as one job: this module is the arithmetic, the same values whatever the block's size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .numba_switch import numba_disabled
from .workload import Workload

if TYPE_CHECKING:
    from .synthetic import LengthComponent, WorkloadConfig

__all__ = [
    "CHUNK_SAMPLES",
    "COMPILED_MIN_SAMPLES",
    "compiled_finish",
    "draw_block",
    "draw_components",
    "draw_lengths",
]


def draw_components(
    rng: np.random.Generator, weights: np.ndarray, per_step: int, out: np.ndarray
) -> np.ndarray:
    """Component index of every sample, as a (num_steps, per_step) int8 matrix.

    One uniform per sample (drawn into `out`, float32 of num_steps x per_step, which the caller
    reuses once the indices are taken) compared with each step's cumulative weights, one
    boundary at a time: K - 1 passes over the samples and no samples x components matrix. With
    two components the one comparison is the index itself.
    """
    num_steps, num_components = weights.shape
    u = rng.random((num_steps, per_step), dtype=np.float32, out=out.reshape(num_steps, per_step))
    cumulative = np.cumsum(weights, axis=1).astype(np.float32)
    if num_components == 2:
        return (u >= cumulative[:, 0, None]).view(np.int8)
    which = np.zeros((num_steps, per_step), dtype=np.int8)
    for j in range(num_components - 1):
        which += u >= cumulative[:, j, None]
    return which


def draw_lengths(
    rng: np.random.Generator,
    component: LengthComponent,
    size: int,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """`size` unscaled response lengths from one component's distribution (into `out`, float32
    of `size`, where given).

    Single precision: lengths become whole tokens below a few million, where float32 is exact
    to well under one token, and it halves the memory traffic of the exp.
    """
    if component.distribution == "pareto":
        # Classical Pareto parametrised by its median: x_m = median / 2**(1/alpha), and
        # x = x_m * exp(E / alpha) with E standard exponential.
        alpha = component.tail_index
        log_x_m = np.log(component.median_tokens) - np.log(2.0) / alpha
        draws = rng.standard_exponential(size, dtype=np.float32, out=out)
        return _exp_affine(draws, 1.0 / alpha, log_x_m)
    return _exp_affine(
        rng.standard_normal(size, dtype=np.float32, out=out),
        component.sigma,
        np.log(component.median_tokens),
    )


def _exp_affine(draws: np.ndarray, slope: float, intercept: float) -> np.ndarray:
    """exp(intercept + slope * draws), in place."""
    draws *= np.float32(slope)
    draws += np.float32(intercept)
    with np.errstate(over="ignore"):  # an overflow is an inf, clipped to the maximum length
        np.exp(draws, out=draws)
    return draws


def _round_into(out: np.ndarray, values: np.ndarray, low: float, high: float) -> None:
    """Clip `values` to [low, high] in place, then round them to whole tokens into `out` (int64)
    in the same pass as the conversion. fmax and fmin also turn a NaN, from 0 x inf at extreme
    drift, into a bound rather than a garbage integer; with whole-token bounds, rounding after
    the clip gives what clipping the rounded values would."""
    np.fmax(values, low, out=values)
    np.fmin(values, high, out=values)
    np.rint(values, out=out, casting="unsafe")


COMPILED_MIN_SAMPLES = 250_000
"""Samples of a block from which its lengths are finished by the compiled pass
(`synthetic_numba`), unless DYNARESIZE_NO_NUMBA=1: there the numpy passes take a few
milliseconds more than it, so a few such blocks repay loading numba (which a context of that
size loads anyway, for the rollout kernels); a small workload never loads it."""
_NO_CHOICES = np.empty(0, dtype=np.int8)
_ONE_RUN = np.zeros(1, dtype=np.int64)
_UNSCALED = np.empty(0, dtype=np.float32)
"""What the compiled pass takes for a one-component or an unscaled block."""


def compiled_finish(num_samples: int) -> bool:
    """Whether a block of `num_samples` samples is finished by the compiled pass."""
    return num_samples >= COMPILED_MIN_SAMPLES and not numba_disabled()


CHUNK_SAMPLES = 1 << 16
"""Samples a block finishes at a time (whole steps, at least one): the scatter into sample
order, the scaling and the rounding of one chunk pass over a few hundred kilobytes that stay in
the processor's cache, in buffers reused from chunk to chunk, where passes over the whole block
would each touch fresh block-sized arrays."""


def draw_block(
    config: WorkloadConfig,
    choices: np.random.Generator,
    lengths: list[np.random.Generator],
    prompts: np.random.Generator,
    scale: np.ndarray,
    weights: np.ndarray,
) -> Workload:
    """One block's workload (the steps of `scale` and `weights`), each section drawn from its
    generator in the order of the one-seed draw: the component choices, each component's
    lengths, the prompts.

    Each component's lengths are drawn together, sorted by component, into one buffer: the
    buffer the choices' uniforms were drawn into, which the prompts' draws then reuse too. Each
    chunk of steps takes its samples' lengths from their components' runs, in order, and is
    finished straight into the int64 results. So a block touches one float32 buffer and its two
    results, where a fresh array per pass would pay the first touch of its pages each time (on
    a cold build, a good part of the draw's cost).
    """
    per_step = config.samples_per_step
    rows = len(scale)
    n = rows * per_step
    comps = config.components
    drawn = np.empty(n, dtype=np.float32)
    if len(comps) == 1:
        which = None
        draw_lengths(lengths[0], comps[0], n, out=drawn)
    else:
        which = draw_components(choices, weights, per_step, drawn)
        sizes = [int(np.count_nonzero(which == j)) for j in range(len(comps))]
        taken = np.cumsum([0, *sizes])
        for j, component in enumerate(comps):
            draw_lengths(lengths[j], component, sizes[j], out=drawn[taken[j] : taken[j + 1]])
    # A multiplier of 1 leaves every float32 as it is: no pass for an unscaled run.
    with np.errstate(over="ignore"):  # a multiplier past float32 is an inf, as its product
        factors = None if np.all(scale == 1.0) else scale.astype(np.float32)
    # The block's two results, allocated as one: measured on cold builds of a 512,000-sample
    # context, two arrays of their own came back from the allocator as fresh pages each time
    # (some 2,600 page faults, a sixth of the build), the one allocation as memory it reused.
    tokens = np.empty((2, n), dtype=np.int64)
    prompt_out, response_tokens = tokens[0], tokens[1]
    low, high = config.min_response_tokens, config.max_response_tokens
    if compiled_finish(n):
        from . import synthetic_numba

        synthetic_numba.finish_responses(
            _NO_CHOICES if which is None else which.reshape(-1),
            drawn,
            _ONE_RUN if which is None else taken[:-1].astype(np.int64),
            _UNSCALED if factors is None else factors,
            per_step,
            np.float32(low),
            np.float32(high),
            response_tokens,
        )
        prompt_tokens = _prompt_tokens(config, prompts, drawn, prompt_out, compiled=True)
        return Workload(prompt_tokens, response_tokens, _offsets(rows, per_step), config.name)
    chunk_rows = max(1, CHUNK_SAMPLES // per_step)
    chunk = np.empty(min(rows, chunk_rows) * per_step, dtype=np.float32)
    for r0 in range(0, rows, chunk_rows):
        r1 = min(rows, r0 + chunk_rows)
        lo, hi = r0 * per_step, r1 * per_step
        if which is None:
            part = drawn[lo:hi]
        else:
            part = chunk[: hi - lo]
            chosen = which[r0:r1].reshape(-1)
            for j in range(len(comps)):
                members = np.flatnonzero(chosen == j)
                part[members] = drawn[taken[j] : taken[j] + len(members)]
                taken[j] += len(members)
        if factors is not None:
            with np.errstate(over="ignore", invalid="ignore"):
                part.reshape(r1 - r0, per_step)[...] *= factors[r0:r1, None]
        _round_into(response_tokens[lo:hi], part, low, high)
    prompt_tokens = _prompt_tokens(config, prompts, drawn, prompt_out, compiled=False)
    return Workload(prompt_tokens, response_tokens, _offsets(rows, per_step), config.name)


def _prompt_tokens(
    config: WorkloadConfig,
    prompts: np.random.Generator,
    drawn: np.ndarray,
    prompt_tokens: np.ndarray,
    *,
    compiled: bool,
) -> np.ndarray:
    """The block's prompt lengths, drawn into `drawn` (reused) and rounded to whole tokens
    into `prompt_tokens` (int64, one per sample), which is returned."""
    prompt = _exp_affine(
        prompts.standard_normal(len(prompt_tokens), dtype=np.float32, out=drawn),
        config.prompt_sigma,
        np.log(config.prompt_median_tokens),
    )
    if compiled:
        from . import synthetic_numba

        high = np.float32(config.max_prompt_tokens)
        synthetic_numba.round_into(prompt, np.float32(1), high, prompt_tokens)
    else:
        _round_into(prompt_tokens, prompt, 1, config.max_prompt_tokens)
    return prompt_tokens


def _offsets(rows: int, per_step: int) -> np.ndarray:
    return np.arange(rows + 1, dtype=np.int64) * per_step
