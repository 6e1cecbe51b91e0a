"""Weight sync cost: trainers push the new weights to the rollout replicas after every step.

    sync_s = latency_s + weights_gb * (gather_s_per_gb + 1 / (bandwidth_gbps * link_efficiency))
             + weights_gb * extra_replica_s_per_gb * (num_replicas - 1)

`gather_s_per_gb` is the per-byte work that does not depend on the link (gathering FSDP shards,
converting layouts, loading into the engine): public reports of 5.5-6 s for a 7B model over NVLink
show it dominates inside a node. The bandwidth is that of the link the sync crosses.
`extra_replica_s_per_gb` is what each further receiving replica adds: about zero for a pipelined
NCCL broadcast, but a broadcast over gloo through host memory grows with the receivers.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SyncCostParams(BaseModel):
    """Parameters of the trainer-to-rollout weight sync."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    latency_s: float = Field(default=0.5, ge=0, description="Fixed seconds per sync.")
    gather_s_per_gb: float = Field(
        default=0.3,
        ge=0,
        description="Seconds per GB of weights for gathering and loading, whatever the link.",
    )
    link_efficiency: float = Field(
        default=0.6, gt=0, le=1, description="Share of the link bandwidth the broadcast achieves."
    )
    extra_replica_s_per_gb: float = Field(
        default=0.0,
        ge=0,
        description="Seconds per GB of weights added by each receiving rollout replica beyond "
        "the first (0 for a broadcast whose time does not grow with receivers).",
    )


def weight_sync_s(
    *,
    weights_gb: float,
    bandwidth_gbps: float,
    params: SyncCostParams,
    num_replicas: int = 1,
) -> float:
    per_gb_s = params.gather_s_per_gb + 1.0 / (bandwidth_gbps * params.link_efficiency)
    extra_s = weights_gb * params.extra_replica_s_per_gb * max(num_replicas - 1, 0)
    return params.latency_s + weights_gb * per_gb_s + extra_s
