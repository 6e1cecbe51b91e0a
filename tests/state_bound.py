"""The bound two trainer states (master weights, AdamW moments) are compared by when the runs
split each step's gradient differently: whole-vector relative error below 1e-3.

Another split adds the same fp32 numbers in another order, a few units of roundoff (about 6e-8)
per sum, which AdamW carries forward as an error of about 1e-7 of each vector per step; a zeroed
moment is off by 1 and a moment one step stale by far more than 1e-3
(tests/executor/test_resize_semantics.py shows both). An element-wise `atol` is the wrong tool:
1e-6 failed a correct run whose near-zero weights differed by 1.25e-6, and accepts a zeroed
`exp_avg_sq`, whose entries are almost all below it.
"""

from __future__ import annotations

import torch

STATE_RELATIVE_ERROR_BOUND = 1e-3

BF16_STATE_RELATIVE_ERROR_BOUND = 2.0**-6
"""The same comparison for a model that computes in bfloat16 on a GPU. There each split runs
its trainers' micro-batches in other shapes, whose kernels round at bfloat16's unit roundoff
(2^-8, about 3.9e-3), so the gradients differ by a few such units and the moments, sums of them,
with them: 2.8e-3 for `exp_avg` on one H100 (2026-12-07), and twice as much relative to the
squared moment. Four units (about 1.6e-2) still fails a zeroed, stale or misplaced moment, which
is off by 0.1 or more."""


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """|a - b| / |b| over the whole vector (2-norms)."""
    return float((a - b).norm() / b.norm().clamp_min(1e-30))
