"""Per-GPU memory of each role on a candidate topology: the paper's OOM hazard, checked up front.

Training state is sharded over the training GPUs (FSDP / ZeRO-3 style): weights, gradients, the fp32
master copy and the optimizer moments all divide by the number of trainers, while activations do
not. When the trainers shrink, each keeps a bigger shard; a candidate whose shard plus activations
no longer fits is infeasible and must be rejected before anything is simulated. A rollout replica
holds one full copy of the weights split over its tensor-parallel group, plus a KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

GB = 1e9


class ModelConfig(BaseModel):
    """The model being trained: its size and the bytes per parameter of every piece of state."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    num_params_b: float = Field(
        gt=0, description="Model parameters, in billions (all experts of a mixture of experts)."
    )
    num_active_params_b: float | None = Field(
        default=None,
        gt=0,
        description="Parameters each token computes with, in billions (a mixture of experts' "
        "active parameters, e.g. 3 for a 35B-A3B model); None: dense, all of num_params_b. "
        "Training compute scales with them; memory, optimizer state, weight sync and resizes "
        "with num_params_b.",
    )
    weight_bytes_per_param: float = Field(
        default=2.0, gt=0, description="Bytes per parameter of the working weights (bf16: 2)."
    )
    gradient_bytes_per_param: float = Field(
        default=2.0, ge=0, description="Bytes per parameter of the gradients (bf16: 2)."
    )
    optimizer_bytes_per_param: float = Field(
        default=8.0, ge=0, description="Bytes per parameter of optimizer state (Adam fp32 m+v: 8)."
    )
    master_bytes_per_param: float = Field(
        default=4.0, ge=0, description="Bytes per parameter of the fp32 master copy (0 if none)."
    )
    activation_memory_gb_per_gpu: float = Field(
        default=10.0, ge=0, description="Activation memory each training GPU needs at peak (GB)."
    )
    rollout_min_kv_cache_gb_per_gpu: float = Field(
        default=4.0, ge=0, description="Smallest KV cache a rollout GPU needs to be useful (GB)."
    )
    resident_engine_gb_per_trainer: float = Field(
        default=0.0,
        ge=0,
        description="Memory a resident rollout engine (KV cache, decode graphs) holds on every "
        "trainer (GB); 0 where engines start on demand. benchmarks/bench_engine_memory.py "
        "measures it.",
    )

    @model_validator(mode="after")
    def _active_within_total(self) -> ModelConfig:
        if self.num_active_params_b is not None and self.num_active_params_b > self.num_params_b:
            raise ValueError(
                f"num_active_params_b {self.num_active_params_b:g} exceeds num_params_b "
                f"{self.num_params_b:g}: a token cannot compute with more parameters than the "
                "model has"
            )
        return self

    @property
    def num_params(self) -> float:
        return self.num_params_b * 1e9

    @property
    def active_fraction(self) -> float:
        """Share of the parameters a token computes with (1 for a dense model)."""
        if self.num_active_params_b is None:
            return 1.0
        return self.num_active_params_b / self.num_params_b

    @property
    def weights_gb(self) -> float:
        return self.num_params * self.weight_bytes_per_param / GB

    @property
    def optimizer_state_gb(self) -> float:
        """Master copy plus optimizer moments: what a deferred optimizer restore moves."""
        return self.num_params * (self.master_bytes_per_param + self.optimizer_bytes_per_param) / GB

    @property
    def train_state_gb(self) -> float:
        """Everything a trainer keeps across steps (weights, master copy, optimizer moments)."""
        return self.weights_gb + self.optimizer_state_gb

    @property
    def gradients_gb(self) -> float:
        return self.num_params * self.gradient_bytes_per_param / GB


@dataclass(frozen=True)
class MemoryCheck:
    """Peak per-GPU memory of each role on one candidate, and whether it fits."""

    label: str
    train_gb_per_gpu: float
    rollout_gb_per_gpu: float
    capacity_gb: float
    resident_engine: bool = False
    """Whether the training figure includes a resident rollout engine."""

    @property
    def train_fits(self) -> bool:
        return self.train_gb_per_gpu <= self.capacity_gb

    @property
    def rollout_fits(self) -> bool:
        return self.rollout_gb_per_gpu <= self.capacity_gb

    @property
    def feasible(self) -> bool:
        return self.train_fits and self.rollout_fits

    def explain(self) -> str:
        """One line naming the candidate and the numbers, for the rejection message."""
        parts = []
        if not self.train_fits:
            parts.append(
                f"each training GPU needs {self.train_gb_per_gpu:.1f} GB "
                "(sharded weights, gradients, master copy, optimizer state plus activations"
                + (" and a resident rollout engine)" if self.resident_engine else ")")
            )
        if not self.rollout_fits:
            parts.append(
                f"each rollout GPU needs {self.rollout_gb_per_gpu:.1f} GB "
                f"(weights over the tensor-parallel group plus the minimum KV cache)"
            )
        return (
            f"candidate {self.label} does not fit in memory: {'; '.join(parts)}, "
            f"but a GPU has {self.capacity_gb:.1f} GB usable"
        )


def train_gb_per_gpu(model: ModelConfig, *, train_gpus: int) -> float:
    """Peak memory of one trainer: its shard of all training state plus activations, and the
    rollout engine it keeps where engines are resident."""
    sharded_gb = model.train_state_gb + model.gradients_gb
    return (
        sharded_gb / train_gpus
        + model.activation_memory_gb_per_gpu
        + model.resident_engine_gb_per_trainer
    )


def rollout_gb_per_gpu(model: ModelConfig, *, tensor_parallel_size: int) -> float:
    """Memory of one rollout GPU: its tensor-parallel slice of the weights plus the KV floor."""
    return model.weights_gb / tensor_parallel_size + model.rollout_min_kv_cache_gb_per_gpu


def check_candidate(
    model: ModelConfig,
    *,
    label: str,
    train_gpus: int,
    tensor_parallel_size: int,
    usable_gpu_memory_gb: float,
) -> MemoryCheck:
    return MemoryCheck(
        label=label,
        train_gb_per_gpu=train_gb_per_gpu(model, train_gpus=train_gpus),
        rollout_gb_per_gpu=rollout_gb_per_gpu(model, tensor_parallel_size=tensor_parallel_size),
        capacity_gb=usable_gpu_memory_gb,
        resident_engine=model.resident_engine_gb_per_trainer > 0,
    )
