"""A workload: the prompt and response lengths of every sample of every step.

Stored ragged (flat arrays plus step offsets) so per-step work stays vectorised: step k owns
`prompt_tokens[step_offsets[k]:step_offsets[k+1]]`. The synthetic generators, the importers that
carry per-sample lengths and the live executor's records all produce this one type, and the twin
consumes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Workload:
    prompt_tokens: np.ndarray
    """Prompt length of each sample, all steps concatenated (int64, tokens)."""
    response_tokens: np.ndarray
    """Response length of each sample, aligned with prompt_tokens (int64, tokens)."""
    step_offsets: np.ndarray
    """num_steps + 1 non-decreasing offsets into the flat arrays, starting at 0."""
    name: str = "workload"

    def __post_init__(self) -> None:
        p, r, o = self.prompt_tokens, self.response_tokens, self.step_offsets
        if p.ndim != 1 or r.ndim != 1 or o.ndim != 1:
            raise ValueError("workload arrays must be one-dimensional")
        if len(p) != len(r):
            raise ValueError("prompt_tokens and response_tokens differ in length")
        if len(o) < 1 or o[0] != 0 or o[-1] != len(p) or np.any(np.diff(o) < 0):
            raise ValueError("step_offsets must start at 0, end at the sample count, never fall")
        if len(p) and (p.min() < 0 or r.min() < 0):
            raise ValueError("token counts must be non-negative")

    @classmethod
    def from_steps(
        cls, prompts: list[np.ndarray], responses: list[np.ndarray], name: str = "workload"
    ) -> Workload:
        if len(prompts) != len(responses):
            raise ValueError("prompts and responses cover a different number of steps")
        sizes = [len(x) for x in responses]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        flat = lambda xs: (  # noqa: E731
            np.concatenate(xs).astype(np.int64, copy=False) if xs else np.zeros(0, np.int64)
        )
        return cls(flat(prompts), flat(responses), offsets, name)

    @property
    def num_steps(self) -> int:
        return len(self.step_offsets) - 1

    def step(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Prompt and response lengths of step k."""
        lo, hi = self.step_offsets[k], self.step_offsets[k + 1]
        return self.prompt_tokens[lo:hi], self.response_tokens[lo:hi]

    def tokens_per_step(self) -> np.ndarray:
        """Prompt plus response tokens of each step (float64, one entry per step)."""
        total = (self.prompt_tokens + self.response_tokens).astype(np.float64)
        return np.bincount(self.step_index(), weights=total, minlength=self.num_steps)

    def step_index(self) -> np.ndarray:
        """Step of each sample, aligned with the flat arrays."""
        return np.repeat(np.arange(self.num_steps), np.diff(self.step_offsets))

    def slice_steps(self, start: int, stop: int) -> Workload:
        lo, hi = self.step_offsets[start], self.step_offsets[stop]
        return Workload(
            self.prompt_tokens[lo:hi],
            self.response_tokens[lo:hi],
            self.step_offsets[start : stop + 1] - lo,
            self.name,
        )
