"""Training stage cost: tokens over the training GPUs with a scaling-efficiency curve, plus the
optimizer step on each GPU's shard.

    train_s = fixed_overhead_s
            + tokens * s_per_token_one_gpu * active_fraction / (n * efficiency(n))
            + optimizer_s_per_gb_shard * optimizer_state_gb / n
            + allreduce_s_per_gb * gradients_gb * 2 (n - 1) / n
            + exchange_s_per_gb * gradients_gb * (1 if n > 1 else 0)
            + collective_s_per_gb_per_extra_gpu * gradients_gb * (n - 1)

with `efficiency(n) = scaling_efficiency_per_doubling ** log2(n)`: every doubling of data-parallel
GPUs keeps that share of linear speedup (communication and load imbalance eat the rest). The
gradient all-reduce is a ring's: each rank sends and receives 2 (n - 1) / n of the gradients, so
it costs nothing on one GPU and is nearly flat beyond a few. Trainers that share one device and
exchange gradients through host memory pay about the same for two ranks as for three (measured on
one H200): a step up from one GPU that does not grow, its own term. Collectives whose cost grows
with the rank count itself (through host memory) have a third.

`active_fraction` is the share of the model's parameters a token computes with: 1 for a dense
model, active over total for a mixture of experts (3/35 for a 35B-A3B model). Compute follows the
active parameters; the optimizer step, gradients and memory follow all of them. So
`s_per_token_one_gpu` is what a dense model of `num_params_b` parameters would need per token,
and a dense model's cost is what it always was.
"""

from __future__ import annotations

from typing import overload

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .memory import ModelConfig


class TrainCostParams(BaseModel):
    """Parameters of the training stage (forward, backward, log-probs and optimizer step)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    s_per_token_one_gpu: float = Field(
        default=2.0e-4,
        ge=0,
        description="Seconds one GPU needs per prompt-plus-response token for the whole update "
        "(log-prob passes, forward and backward) of a dense model of the model's size; a "
        "mixture of experts pays its active share of it.",
    )
    scaling_efficiency_per_doubling: float = Field(
        default=0.95,
        gt=0,
        le=1,
        description="Share of linear speedup kept per doubling of training GPUs.",
    )
    fixed_overhead_s: float = Field(
        default=1.0, ge=0, description="Per-step seconds that do not shrink with GPUs."
    )
    optimizer_s_per_gb_shard: float = Field(
        default=0.05,
        ge=0,
        description="Seconds of the optimizer step per GB of master-plus-optimizer state a GPU "
        "holds.",
    )
    first_step_warmup_s: float = Field(
        default=0.0,
        ge=0,
        description="Extra seconds of the first training step of a run (allocator growth, "
        "kernel selection, first collectives), paid once.",
    )
    allreduce_s_per_gb: float = Field(
        default=0.0,
        ge=0,
        description="Seconds per GB of gradients for a ring all-reduce's 2(n-1)/n traffic on n "
        "training GPUs: zero on one GPU, nearly flat beyond a few.",
    )
    exchange_s_per_gb: float = Field(
        default=0.0,
        ge=0,
        description="Seconds per GB of gradients for an exchange that costs the same on any "
        "number of training GPUs beyond one: zero on one GPU, flat from two (trainers sharing "
        "one device over host memory behave so).",
    )
    collective_s_per_gb_per_extra_gpu: float = Field(
        default=0.0,
        ge=0,
        description="Seconds per GB of gradients that each training GPU beyond the first adds "
        "to the step: collectives that grow with the rank count, as through host memory over "
        "gloo. A ring all-reduce over NVLink is nearly flat in the rank count; its cost lands "
        "in fixed_overhead_s.",
    )


def scaling_efficiency(num_gpus: int | np.ndarray, params: TrainCostParams) -> np.ndarray:
    return params.scaling_efficiency_per_doubling ** np.log2(np.asarray(num_gpus, dtype=float))


@overload
def ring_traffic(num_gpus: int) -> float: ...
@overload
def ring_traffic(num_gpus: np.ndarray) -> np.ndarray: ...
def ring_traffic(num_gpus: int | np.ndarray) -> float | np.ndarray:
    """Share of the gradients each rank sends in a ring all-reduce over `num_gpus` ranks;
    elementwise for an array of rank counts."""
    n = np.asarray(num_gpus, dtype=float)
    traffic = 2.0 * (n - 1.0) / n
    return float(traffic) if np.ndim(traffic) == 0 else traffic


def optimizer_step_s(*, train_gpus: int, model: ModelConfig, params: TrainCostParams) -> float:
    return params.optimizer_s_per_gb_shard * model.optimizer_state_gb / train_gpus


def train_stage_s(
    tokens: np.ndarray | float,
    *,
    train_gpus: int,
    model: ModelConfig,
    params: TrainCostParams,
) -> np.ndarray:
    """Seconds of the training stage for each entry of `tokens` (vectorised)."""
    tokens = np.asarray(tokens, dtype=np.float64)
    efficiency = float(scaling_efficiency(train_gpus, params))
    per_token_s = params.s_per_token_one_gpu
    if model.num_active_params_b is not None:  # a dense model's figure stays exactly as it was
        per_token_s *= model.active_fraction
    compute_s = tokens * per_token_s / (train_gpus * efficiency)
    collective_s = params.collective_s_per_gb_per_extra_gpu * model.gradients_gb * (train_gpus - 1)
    collective_s += params.allreduce_s_per_gb * model.gradients_gb * ring_traffic(train_gpus)
    if train_gpus > 1:
        collective_s += params.exchange_s_per_gb * model.gradients_gb
    return (
        params.fixed_overhead_s
        + compute_s
        + collective_s
        + optimizer_step_s(train_gpus=train_gpus, model=model, params=params)
    )
