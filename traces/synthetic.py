"""Seeded synthetic workloads: per-sample prompt and response lengths for every step.

Real RL rollouts mix short answers with long reasoning, and the long tail decides how long a
rollout stage takes. The generator draws response lengths from a mixture of lognormal and Pareto
components, clips them at a maximum length, and lets the mixture drift over the run: lengths that
grow by a share per step, and regime switches at given steps that rescale lengths or re-weight
the mixture. Everything is drawn in vectorised numpy blocks from one seed, so the same config
and seed always give the same `Workload`.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .synthetic_draw import draw_block, draw_components, draw_lengths
from .workload import Workload

__all__ = [
    "PRESETS",
    "LengthComponent",
    "LengthDistribution",
    "RegimeSwitch",
    "WorkloadConfig",
    "generate_workload",
    "preset",
    "resolve_workload_spec",
    "workload_blocks",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class LengthDistribution(str, Enum):
    LOGNORMAL = "lognormal"
    """exp(N(log(median), sigma)): a heavy but thin-tailed body."""
    PARETO = "pareto"
    """Classical Pareto with tail index `tail_index`: a power-law tail of stragglers."""


class LengthComponent(_Strict):
    """One kind of sample in the mixture (e.g. short QA, long reasoning)."""

    name: str = Field(default="component", description="Label of this kind of sample.")
    weight: float = Field(gt=0, description="Relative share of samples of this kind.")
    distribution: LengthDistribution = Field(
        default=LengthDistribution.LOGNORMAL, description="lognormal or pareto."
    )
    median_tokens: float = Field(gt=0, description="Median response length (tokens).")
    sigma: float = Field(
        default=0.5, ge=0, description="Lognormal only: standard deviation of log length."
    )
    tail_index: float = Field(
        default=1.5, gt=0, description="Pareto only: tail index alpha (smaller = heavier tail)."
    )


class RegimeSwitch(_Strict):
    """From `at_step` on, lengths are rescaled and, optionally, the mixture re-weighted."""

    at_step: int = Field(ge=0, description="First step of the new regime.")
    length_scale: float = Field(
        default=1.0, gt=0, description="Multiplier on response lengths from this step on."
    )
    component_weights: list[float] | None = Field(
        default=None,
        description="New relative weights of the components (same order); None keeps them.",
    )


class WorkloadConfig(_Strict):
    """A synthetic workload: how many samples per step and how their lengths are distributed."""

    name: str = Field(default="custom", description="Name shown in records and docs.")
    samples_per_step: int = Field(ge=1, description="Responses generated per training step.")
    prompt_median_tokens: float = Field(default=256.0, gt=0, description="Median prompt length.")
    prompt_sigma: float = Field(default=0.4, ge=0, description="Std. dev. of log prompt length.")
    max_prompt_tokens: int = Field(default=2048, ge=1, description="Prompts are clipped here.")
    components: list[LengthComponent] = Field(
        min_length=1, description="Mixture of response-length distributions."
    )
    min_response_tokens: int = Field(default=1, ge=0, description="Shortest response (tokens).")
    max_response_tokens: int = Field(
        ge=1, description="Responses are clipped at this length, as a generation limit does."
    )
    length_growth_per_step: float = Field(
        default=0.0,
        gt=-1,
        description="Lengths grow by this share per step, compounding (0.01 = 1% per step).",
    )
    length_growth_stop_step: int | None = Field(
        default=None,
        ge=0,
        description="Step from which lengths stop growing (a plateau); None: they grow all run.",
    )
    regime_switches: list[RegimeSwitch] = Field(
        default_factory=list, description="Changes of regime at given steps."
    )

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadConfig:
        if self.min_response_tokens > self.max_response_tokens:
            raise ValueError("min_response_tokens is above max_response_tokens")
        for i, switch in enumerate(self.regime_switches):
            w = switch.component_weights
            if w is not None and (len(w) != len(self.components) or min(w) < 0 or sum(w) <= 0):
                raise ValueError(
                    f"regime_switches[{i}].component_weights needs {len(self.components)} "
                    "non-negative weights with a positive sum"
                )
        return self

    def schedule(self, num_steps: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-step length multiplier (num_steps,) and mixture weights (num_steps, components)."""
        steps = np.arange(num_steps)
        growth_steps = (
            steps
            if self.length_growth_stop_step is None
            else np.minimum(steps, self.length_growth_stop_step)
        )
        scale = (1.0 + self.length_growth_per_step) ** growth_steps
        weights = np.tile([c.weight for c in self.components], (num_steps, 1)).astype(float)
        for switch in sorted(self.regime_switches, key=lambda s: s.at_step):
            after = steps >= switch.at_step
            scale[after] *= switch.length_scale
            if switch.component_weights is not None:
                weights[after] = switch.component_weights
        return scale, weights / weights.sum(axis=1, keepdims=True)


def generate_workload(config: WorkloadConfig, num_steps: int, seed: int) -> Workload:
    """Draw every sample of every step from one seed; same inputs, same workload.

    Each sample's length is drawn only from its own component (one draw per sample, in
    vectorised blocks per component), then scaled by its step's multiplier. Built from
    `workload_blocks`, so that it holds the finished arrays and one block's draws at a time.
    """
    if num_steps < 0:
        raise ValueError("num_steps must be non-negative")
    if num_steps * config.samples_per_step <= BLOCK_SAMPLES:  # one block: no copy
        for _, whole in workload_blocks(config, num_steps, seed):
            return whole
    n = num_steps * config.samples_per_step
    prompt_tokens = np.empty(n, dtype=np.int64)
    response_tokens = np.empty(n, dtype=np.int64)
    for first_step, block in workload_blocks(config, num_steps, seed):
        lo = first_step * config.samples_per_step
        hi = lo + len(block.prompt_tokens)
        prompt_tokens[lo:hi] = block.prompt_tokens
        response_tokens[lo:hi] = block.response_tokens
    offsets = np.arange(num_steps + 1, dtype=np.int64) * config.samples_per_step
    return Workload(prompt_tokens, response_tokens, offsets, config.name)


BLOCK_SAMPLES = 1 << 22
"""Samples drawn at a time by `workload_blocks` (whole steps, at least one): 4M samples, about
100 MB of draws and results in flight."""


def _draw_streams(
    config: WorkloadConfig, num_steps: int, seed: int, steps_per_block: int
) -> tuple[np.random.Generator, list[np.random.Generator], np.random.Generator]:
    """Generators standing where the one-seed draw of `generate_workload` starts each of its
    sections: the component choices, each component's lengths, the prompts.

    The workload draws each section over the whole run before the next, one value after the
    other (a chunk of draws is the same values as one draw of all of them), so a block of
    steps takes its values from a generator per section. Where a section starts is found by
    drawing the sections before it once, a block at a time.
    """
    per_step = config.samples_per_step
    rng = np.random.default_rng(seed)
    choices = np.random.default_rng(seed)
    num_components = len(config.components)
    counts = np.zeros(num_components, dtype=np.int64)
    block_samples = steps_per_block * per_step
    scratch = np.empty(min(num_steps * per_step, block_samples), dtype=np.float32)
    if num_components == 1:
        counts[0] = num_steps * per_step
    else:
        _, weights = config.schedule(num_steps)
        for lo in range(0, num_steps, steps_per_block):
            part = weights[lo : lo + steps_per_block]
            which = draw_components(rng, part, per_step, scratch[: len(part) * per_step])
            counts += [np.count_nonzero(which == j) for j in range(num_components)]
    lengths = []
    for component, count in zip(config.components, counts, strict=True):
        lengths.append(_generator_at(rng))
        for lo in range(0, int(count), block_samples):
            size = min(block_samples, int(count) - lo)
            draw_lengths(rng, component, size, out=scratch[:size])
    return choices, lengths, rng


def _generator_at(rng: np.random.Generator) -> np.random.Generator:
    """A generator that draws what `rng` would draw next (rng itself goes on unchanged)."""
    copy = np.random.default_rng()
    copy.bit_generator.state = rng.bit_generator.state
    return copy


def workload_blocks(
    config: WorkloadConfig, num_steps: int, seed: int, *, block_samples: int = BLOCK_SAMPLES
) -> Iterator[tuple[int, Workload]]:
    """The workload of `generate_workload(config, num_steps, seed)`, a block of whole steps at a
    time: (first step, that block's workload), the same numbers, with the memory of one block.
    """
    if num_steps < 0:
        raise ValueError("num_steps must be non-negative")
    per_step = config.samples_per_step
    steps_per_block = max(1, block_samples // per_step)
    if steps_per_block >= num_steps:
        # One block: its sections are drawn whole, in the order of the one-seed draw, so one
        # generator serves them all and nothing is drawn twice to find where a section starts.
        rng = np.random.default_rng(seed)
        choices, lengths, prompts = rng, [rng] * len(config.components), rng
    else:
        choices, lengths, prompts = _draw_streams(config, num_steps, seed, steps_per_block)
    scale, weights = config.schedule(num_steps)
    for first in range(0, num_steps, steps_per_block):
        last = min(num_steps, first + steps_per_block)
        yield (
            first,
            draw_block(config, choices, lengths, prompts, scale[first:last], weights[first:last]),
        )


def _short_qa(weight: float) -> LengthComponent:
    return LengthComponent(name="short_qa", weight=weight, median_tokens=300, sigma=0.5)


PRESETS: dict[str, WorkloadConfig] = {
    "low_variance": WorkloadConfig(
        name="low_variance",
        samples_per_step=256,
        components=[LengthComponent(name="uniform_task", weight=1, median_tokens=600, sigma=0.25)],
        max_response_tokens=4096,
    ),
    "high_variance": WorkloadConfig(
        name="high_variance",
        samples_per_step=256,
        components=[
            _short_qa(0.75),
            LengthComponent(
                name="long_reasoning",
                weight=0.25,
                distribution=LengthDistribution.PARETO,
                median_tokens=1500,
                tail_index=1.8,
            ),
        ],
        max_response_tokens=16384,
    ),
    # The paper's setting (dynaresize/configs/paper.yaml): long prompts, short answers that grow
    # 7.2% per step for 20 steps and then plateau, so training is the bottleneck at first and
    # rollout later.
    "growing_lengths": WorkloadConfig(
        name="growing_lengths",
        samples_per_step=256,
        prompt_median_tokens=3000,
        prompt_sigma=0.2,
        max_prompt_tokens=8192,
        components=[
            LengthComponent(name="short_qa", weight=0.6, median_tokens=100, sigma=0.5),
            LengthComponent(name="long_reasoning", weight=0.4, median_tokens=320, sigma=0.5),
        ],
        max_response_tokens=8192,
        length_growth_per_step=0.072,
        length_growth_stop_step=20,
    ),
    "regime_switch": WorkloadConfig(
        name="regime_switch",
        samples_per_step=256,
        components=[
            _short_qa(0.8),
            LengthComponent(
                name="long_reasoning",
                weight=0.2,
                distribution=LengthDistribution.PARETO,
                median_tokens=2500,
                tail_index=1.5,
            ),
        ],
        max_response_tokens=16384,
        regime_switches=[RegimeSwitch(at_step=50, component_weights=[0.4, 0.6])],
    ),
}


def preset(name: str) -> WorkloadConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown workload preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]


def resolve_workload_spec(value: Any) -> Any:
    """Accept a preset name, `{preset: NAME, <overrides>}` or a full config mapping."""
    if isinstance(value, str):
        return preset(value)
    if isinstance(value, dict) and "preset" in value:
        overrides = {k: v for k, v in value.items() if k != "preset"}
        return {**preset(str(value["preset"])).model_dump(), **overrides}
    return value
