"""Per-candidate predictions for the policy's observation, from what this run has measured.

Stage times on another split are scaled from the recent measured ones by the ratio of GPUs in
each role (rollout replicas split the prompts; trainers split the batch), which is what a
data-parallel split does to first order. The resize cost is, in order of preference: the mean
critical path of the resizes this run has measured (`measured`); the twin's resize cost model
with the parameters of `--costs` (`calibrated`); the twin's model with its defaults (`model`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from dynaresize.policies.types import (
    Allocation,
    CandidatePrediction,
    CostSource,
    StageTimes,
)
from dynaresize.traces.phases import StrategyName

from .config import PipelineMode


class CandidateEstimator:
    """Fills the `candidates` of each observation."""

    def __init__(
        self,
        *,
        candidates: tuple[Allocation, ...],
        pipeline: PipelineMode,
        strategy: StrategyName,
        num_params: int,
        weight_bytes_per_param: int,
        costs_path: Path | None,
    ) -> None:
        self.candidates = candidates
        self.pipeline = pipeline
        self.model_critical_s, self.model_background_s, self.model_source = _twin_resize_cost(
            strategy=strategy,
            num_params=num_params,
            weight_bytes_per_param=weight_bytes_per_param,
            costs_path=costs_path,
        )

    def predict(
        self,
        *,
        current: Allocation,
        recent: tuple[StageTimes, ...],
        measured_resize_s: tuple[float, ...],
    ) -> tuple[CandidatePrediction, ...]:
        on_current = [t for t in recent if t.allocation == current] or list(recent)
        rollout_gpu_s = np.mean([t.rollout_s * t.allocation.rollout_gpus for t in on_current])
        train_gpu_s = np.mean([t.train_s * t.allocation.train_gpus for t in on_current])
        sync_s = float(np.mean([t.sync_s for t in on_current]))
        if measured_resize_s:
            critical_s, background_s = float(np.mean(measured_resize_s)), 0.0
            source = CostSource.MEASURED
        else:
            critical_s, background_s = self.model_critical_s, self.model_background_s
            source = self.model_source
        out = []
        for cand in self.candidates:
            rollout_s = rollout_gpu_s / cand.rollout_gpus
            train_s = train_gpu_s / cand.train_gpus
            if self.pipeline is PipelineMode.ONE_STEP_OFF:
                step_s = max(rollout_s, train_s) + sync_s
            else:
                step_s = rollout_s + train_s + sync_s
            same = cand == current
            out.append(
                CandidatePrediction(
                    allocation=cand,
                    predicted_step_s=float(step_s),
                    predicted_resize_critical_s=0.0 if same else critical_s,
                    predicted_resize_background_s=0.0 if same else background_s,
                    cost_source=source,
                )
            )
        return tuple(out)


def _twin_resize_cost(
    *,
    strategy: StrategyName,
    num_params: int,
    weight_bytes_per_param: int,
    costs_path: Path | None,
) -> tuple[float, float, CostSource]:
    """Critical path and slowdown of one resize of this model by the twin's resize cost model."""
    from dynaresize.twin.costs import CostModels, load_costs
    from dynaresize.twin.costs.memory import ModelConfig
    from dynaresize.twin.costs.resize import plan_resize

    costs = load_costs(costs_path) if costs_path is not None else CostModels()
    model = ModelConfig(
        num_params_b=num_params / 1e9,
        weight_bytes_per_param=float(weight_bytes_per_param),
        gradient_bytes_per_param=float(weight_bytes_per_param),
    )
    params = costs.resize
    plan = plan_resize(
        strategy=strategy,
        model=model,
        params=params,
        host_bandwidth_gbps=params.reference_host_bandwidth_gbps,
        interconnect_bandwidth_gbps=params.reference_interconnect_bandwidth_gbps,
    )
    return plan.critical_s, plan.slowdown_s, costs.cost_source
