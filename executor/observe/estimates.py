"""Per-candidate predictions for the policy's observation.

Stage times on each candidate split come from one of two sources:
- with `--costs` and a run configuration that describes the cluster and model to the twin, the
  twin's cost models (`twin.step_costs.stage_time_components`) applied to the per-sample lengths
  of the batch just trained on, with the calibrated parameters;
- otherwise the recent measured stage times, scaled by the ratio of GPUs in each role (rollout
  replicas split the prompts; trainers split the batch), which is what a data-parallel split does
  to first order.
The resize cost is, in order of preference: the mean critical path of the resizes this run has
measured (`measured`); the twin's resize cost model with the parameters of `--costs`
(`calibrated`); the twin's model with its defaults (`model`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dynaresize.policies.types import (
    Allocation,
    CandidatePrediction,
    CostSource,
    StageTimes,
)
from dynaresize.traces.phases import StrategyName

from ..batch import RolloutBatch
from ..config import LiveConfig, PipelineMode

if TYPE_CHECKING:
    from dynaresize.twin.config import ScenarioConfig
    from dynaresize.twin.costs import CostModels


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
        scenario: ScenarioConfig | None = None,
        workers_per_node: int | None = None,
    ) -> None:
        """`workers_per_node`: where the nodes are known to hold equal numbers of workers, so
        that a calibrated model with per-path bandwidths prices cross-node pieces of a re-cut."""
        self.candidates = candidates
        self.pipeline = pipeline
        self.weight_bytes_per_param = weight_bytes_per_param
        self.scenario = scenario if costs_path is not None else None
        self.costs = _load_costs(costs_path)
        self.model_source = self.costs.cost_source
        self._plans = _twin_resize_plans(
            strategy=strategy,
            num_params=num_params,
            weight_bytes_per_param=weight_bytes_per_param,
            costs=self.costs,
            workers_per_node=workers_per_node,
        )
        costlier = self._plans.costlier
        # One figure for the cost feedback's fallback: the costlier direction's plan.
        self.model_critical_s, self.model_background_s = costlier.critical_s, costlier.slowdown_s

    @classmethod
    def for_run(
        cls,
        live: LiveConfig,
        *,
        num_params: int,
        strategy: StrategyName,
        costs_path: Path | None,
        scenario: ScenarioConfig | None = None,
    ) -> CandidateEstimator:
        """The estimator of a live run: its candidates and pipeline, its model's parameter count
        and bytes per parameter (from the model's dtype)."""
        return cls(
            candidates=live.candidates,
            pipeline=live.pipeline,
            strategy=strategy,
            num_params=num_params,
            weight_bytes_per_param=live.model.dtype.bytes_per_param,
            costs_path=costs_path,
            scenario=scenario,
            workers_per_node=_pinned_workers_per_node(live),
        )

    def predict(
        self,
        *,
        current: Allocation,
        recent: tuple[StageTimes, ...],
        measured_resize_s: tuple[float, ...],
        last_batch: RolloutBatch | None = None,
    ) -> tuple[CandidatePrediction, ...]:
        if self.scenario is not None and last_batch is not None:
            stages = self._twin_stages(last_batch, self.scenario)
        else:
            stages = self._scaled_stages(current, recent)
        source = CostSource.MEASURED if measured_resize_s else self.model_source
        out = []
        for cand, (rollout_s, train_s, sync_s) in zip(self.candidates, stages, strict=True):
            if self.pipeline is PipelineMode.ONE_STEP_OFF:
                step_s = max(rollout_s, train_s) + sync_s
            else:
                step_s = rollout_s + train_s + sync_s
            if cand == current:
                critical_s, background_s = 0.0, 0.0
            elif measured_resize_s:
                critical_s, background_s = float(np.mean(measured_resize_s)), 0.0
            else:
                plan = self._plans.between(current, cand)
                critical_s, background_s = plan.critical_s, plan.slowdown_s
            out.append(
                CandidatePrediction(
                    allocation=cand,
                    predicted_step_s=float(step_s),
                    predicted_resize_critical_s=critical_s,
                    predicted_resize_background_s=background_s,
                    cost_source=source,
                )
            )
        return tuple(out)

    def _scaled_stages(
        self, current: Allocation, recent: tuple[StageTimes, ...]
    ) -> list[tuple[float, float, float]]:
        on_current = [t for t in recent if t.allocation == current] or list(recent)
        # GPU-seconds per step of each role: the work, whatever the split that did it
        rollout_gpu_s = float(
            np.mean([t.rollout_s * t.allocation.rollout_gpus for t in on_current])
        )
        train_gpu_s = float(np.mean([t.train_s * t.allocation.train_gpus for t in on_current]))
        sync_s = float(np.mean([t.sync_s for t in on_current]))
        return [
            (rollout_gpu_s / c.rollout_gpus, train_gpu_s / c.train_gpus, sync_s)
            for c in self.candidates
        ]

    def _twin_stages(
        self, batch: RolloutBatch, scenario: ScenarioConfig
    ) -> list[tuple[float, float, float]]:
        from dynaresize.traces.workload import Workload
        from dynaresize.twin.step_costs import stage_time_components

        workload = Workload.from_steps([batch.prompt_lengths()], [batch.response_lengths()])
        rollout, train, sync = stage_time_components(
            workload,
            candidates=self.candidates,
            cluster=scenario.cluster,
            model=scenario.model,
            costs=self.costs,
            starts_run=False,
        )
        return [
            (float(rollout[0, c]), float(train[0, c]), float(sync[c]))
            for c in range(len(self.candidates))
        ]


def _pinned_workers_per_node(live: LiveConfig) -> int | None:
    """Workers per node where `live.placement.nodes` pins equal numbers on every node."""
    sizes = {slot.num_workers for slot in live.placement.nodes}
    return sizes.pop() if len(sizes) == 1 else None


def _load_costs(costs_path: Path | None):
    from dynaresize.twin.costs import CostModels, load_costs

    return load_costs(costs_path) if costs_path is not None else CostModels()


def _twin_resize_plans(
    *,
    strategy: StrategyName,
    num_params: int,
    weight_bytes_per_param: int,
    costs: CostModels,
    workers_per_node: int | None = None,
):
    """The twin's resize plans of this model: critical path and slowdown of every move."""
    from dynaresize.twin.costs.memory import ModelConfig
    from dynaresize.twin.costs.resize import plan_resizes

    model = ModelConfig(
        num_params_b=num_params / 1e9,
        weight_bytes_per_param=float(weight_bytes_per_param),
        gradient_bytes_per_param=float(weight_bytes_per_param),
    )
    params = costs.resize
    return plan_resizes(
        strategy=strategy,
        model=model,
        params=params,
        host_bandwidth_gbps=params.reference_host_bandwidth_gbps,
        interconnect_bandwidth_gbps=params.reference_interconnect_bandwidth_gbps,
        workers_per_node=workers_per_node,
    )
