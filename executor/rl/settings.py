"""The GRPO objective's and the AdamW optimizer's settings: one set of names, checked without torch.

They are the `objective:` and `optimizer:` of the `live:` section; `grpo.compute_loss` reads the
objective's, the trainer (`executor/worker/trainer.py`) the optimizer's.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ObjectiveSettings(BaseModel):
    """The GRPO objective (`rl.grpo`): clipping and group-relative advantages."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip_eps_low: float = Field(default=0.2, ge=0, description="Lower clip: ratio >= 1 - this.")
    clip_eps_high: float = Field(default=0.2, ge=0, description="Upper clip: ratio <= 1 + this.")
    normalize_advantage_std: bool = Field(
        default=True, description="Divide advantages by the group's reward standard deviation."
    )
    advantage_eps: float = Field(
        default=1e-6, gt=0, description="Added to the group std before dividing."
    )


class OptimizerSettings(BaseModel):
    """AdamW over the flat, sharded parameter vector (ZeRO-1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lr: float = Field(default=1e-4, gt=0, description="Learning rate.")
    betas: tuple[float, float] = Field(default=(0.9, 0.999), description="Adam betas.")
    eps: float = Field(default=1e-8, gt=0, description="Adam epsilon.")
    weight_decay: float = Field(default=0.0, ge=0, description="Decoupled weight decay.")
    grad_clip_norm: float | None = Field(
        default=1.0, gt=0, description="Clip the global gradient norm to this; None: no clipping."
    )
