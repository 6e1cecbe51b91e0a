"""Lending within a step: what activating and deactivating the trainers' replicas cost.

The trainers' GPUs hold sleeping rollout replicas (veRL's hybrid replicas). A lend activates
them (wake, load the current weights) and later deactivates them (abort their requests, sleep).
Each is one phase of `ResizeCostParams` (`activate`, `deactivate`), priced like a resize phase:
`base_s + s_per_gb * gb * bandwidth scale`, never faster than its link allows. The replicas act
in parallel and each GPU moves only its tensor-parallel share of the weights, so the cost does
not depend on how many replicas are lent.
"""

from __future__ import annotations

from dataclasses import dataclass

from .memory import ModelConfig
from .resize import Link, PhaseCostParams, ResizeCostParams, gb_moved


@dataclass(frozen=True)
class LendPlan:
    """Durations of one lend's two phases."""

    activate_s: float
    deactivate_s: float

    @property
    def switch_s(self) -> float:
        return self.activate_s + self.deactivate_s


def plan_lend(
    *,
    model: ModelConfig,
    params: ResizeCostParams,
    tensor_parallel_size: int,
    host_bandwidth_gbps: float,
    interconnect_bandwidth_gbps: float,
) -> LendPlan:
    """The activate and deactivate phases of the scenario's model on its links."""

    def seconds(phase: PhaseCostParams) -> float:
        gb = gb_moved(phase.moves, model) / tensor_parallel_size
        scale = params.bandwidth_scale(
            phase.link,
            host_bandwidth_gbps=host_bandwidth_gbps,
            interconnect_bandwidth_gbps=interconnect_bandwidth_gbps,
        )
        link_gbps = host_bandwidth_gbps if phase.link is Link.HOST else interconnect_bandwidth_gbps
        return max(phase.base_s + phase.s_per_gb * gb * scale, gb / link_gbps)

    return LendPlan(seconds(params.activate), seconds(params.deactivate))
