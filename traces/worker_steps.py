"""What each worker did in one step: one record per trainer and one per rollout replica.

A step record keeps the slowest trainer's time and the slowest replica's; where that time goes
(the gradient's forward and backward, the collectives, the optimizer update, the device memory
the step found) is per worker, and the twin's stage models can only be checked against it
there. They ride in the trace as extra-metric records (keys `train_worker` and
`rollout_replica`, the record as JSON), as the transfer records do (`transfers.py`), so trace
schema v1 carries them and every reader that does not know them passes them through untouched.

A part that a worker could not measure is None (on a CPU the device-memory figures, on one
trainer the collectives' share, which is then 0 by construction).
"""

from __future__ import annotations

import json

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from .schema import ExtraMetricRecord

TRAIN_WORKER_KEY = "train_worker"
"""The extra-metric key of a trainer's step record."""
ROLLOUT_REPLICA_KEY = "rollout_replica"
"""The extra-metric key of a rollout replica's step record."""


class TrainWorkerStep(BaseModel):
    """One trainer's share of one training step."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    worker_id: int = Field(ge=0)
    rank: int = Field(ge=0, description="Its rank in the trainer group.")
    num_trainers: int = Field(ge=1)
    train_s: float = Field(ge=0, description="The whole step on this trainer (s).")
    compute_s: float | None = Field(
        default=None, ge=0, description="Forward and backward of every micro-batch (s)."
    )
    all_reduce_s: float | None = Field(
        default=None, ge=0, description="The gradient's all-reduce, host copies included (s)."
    )
    optimizer_s: float | None = Field(
        default=None,
        ge=0,
        description="Clipping and the optimizer update, a wait for moments still loading "
        "after a resize included (s).",
    )
    all_gather_s: float | None = Field(
        default=None, ge=0, description="The updated slices gathered into the model (s)."
    )
    moments_wait_s: float = Field(
        default=0.0,
        ge=0,
        description="Of optimizer_s, the wait for optimizer moments still loading after a "
        "resize (s).",
    )
    micro_batches: int = Field(ge=0)
    token_budget: int | None = Field(
        default=None, description="Tokens a micro-batch could hold (None: rows decide)."
    )
    device_free_bytes: int | None = Field(
        default=None, description="Free device memory at the step's start, as the driver says."
    )
    device_allocs: int | None = Field(
        default=None,
        description="Device allocations the caching allocator made during the step (each a "
        "cudaMalloc: memory it did not hold yet).",
    )
    alloc_retries: int | None = Field(
        default=None,
        description="Allocations that failed and were retried after freeing the allocator's "
        "cache during the step (memory ran short).",
    )
    reserved_bytes: int | None = Field(
        default=None, description="Device memory the allocator holds at the step's end."
    )
    host_load_1m: float | None = Field(
        default=None, description="The host's one-minute load average at the step's start."
    )


class RolloutReplicaStep(BaseModel):
    """One rollout replica's share of one batch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    worker_id: int = Field(ge=0)
    wall_s: float = Field(ge=0, description="The worker's generate call, scoring included (s).")
    engine_s: float | None = Field(
        default=None, ge=0, description="The engine's own generate call (s)."
    )
    decode_iterations: int | None = Field(
        default=None, ge=0, description="Engine steps the batch took (None: not reported)."
    )
    samples: int = Field(ge=0)
    response_tokens: int = Field(ge=0)
    host_load_1m: float | None = Field(
        default=None, description="The host's one-minute load average at the call's start."
    )


def train_worker_extra(record: TrainWorkerStep, *, step: int) -> ExtraMetricRecord:
    return ExtraMetricRecord(step=step, key=TRAIN_WORKER_KEY, value_json=record.model_dump_json())


def rollout_replica_extra(record: RolloutReplicaStep, *, step: int) -> ExtraMetricRecord:
    return ExtraMetricRecord(
        step=step, key=ROLLOUT_REPLICA_KEY, value_json=record.model_dump_json()
    )


def worker_steps_frame(extras: pd.DataFrame, key: str) -> pd.DataFrame:
    """The records of `key` (`TRAIN_WORKER_KEY` or `ROLLOUT_REPLICA_KEY`) among a trace's extra
    metrics, one row each with its step (empty if none)."""
    model = TrainWorkerStep if key == TRAIN_WORKER_KEY else RolloutReplicaStep
    columns = ["step", *model.model_fields]
    if extras.empty or "key" not in extras:
        return pd.DataFrame(columns=columns)
    rows = extras[extras["key"] == key]
    records = [
        {"step": int(step), **model.model_validate(json.loads(value)).model_dump()}
        for step, value in zip(rows["step"], rows["value_json"], strict=True)
    ]
    return pd.DataFrame(records, columns=columns)
