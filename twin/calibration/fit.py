"""Stage-cost fitting: the twin's cost-model parameters from traces' own measurements.

Each stage has one fitter (`fit_rollout`, `fit_train`, `fit_sync`) that takes the measured steps
and the per-sample workload and returns new parameters with the fit quality (R², residuals) and
the assumptions it had to make. `fit_costs` gathers the inputs of one or more traces and runs the
fitters in order. It is the one place calibration grows: a later fitter (resize phases, from
resize records) joins through `extra_fitters`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dynaresize.policies.types import CostSource
from dynaresize.traces.io import Trace
from dynaresize.traces.workload import Workload
from dynaresize.traces.workload_stream import WorkloadStream

from ..costs import CostModels
from ..costs.memory import ModelConfig
from .fit_rollout import fit_rollout
from .fit_sync import fit_sync
from .fit_train import fit_train
from .stage_fit import FitError, FitInputs, StageFit, StageFitter, gather_inputs

__all__ = [
    "CostFit",
    "FitError",
    "FitInputs",
    "StageFit",
    "StageFitter",
    "fit_costs",
    "fitted_overrides",
]


@dataclass(frozen=True)
class CostFit:
    """The fitted cost models and one record per fitted stage."""

    costs: CostModels
    stages: list[StageFit]
    notes: list[str]

    def stage(self, name: str) -> StageFit:
        for s in self.stages:
            if s.stage == name:
                return s
        raise KeyError(name)

    def quality_lines(self) -> list[str]:
        """Fit quality of every stage and what each fitter assumed."""
        lines = [s.describe() for s in self.stages]
        return lines + [f"assumed ({s.stage}): {a}" for s in self.stages for a in s.assumptions]

    def report_lines(self) -> list[str]:
        return self.quality_lines() + [f"note: {n}" for n in self.notes]

    def warning_lines(self) -> list[str]:
        """Stages whose fit leaves much of a clearly varying measurement unexplained: the
        twin's extrapolation to other splits then rests on the held parameters, not the data."""
        lines = []
        for s in self.stages:
            r2, mean = s.r2, s.mean_s
            if r2 is None or r2 >= POOR_FIT_R2 or mean <= 0:
                continue
            spread = s.rmse_s / mean
            if spread >= POOR_FIT_RMSE_SHARE:
                lines.append(
                    f"warning: the {s.stage} fit explains little of the measured variation "
                    f"(R² {r2:.3f}, RMSE {spread:.0%} of the mean {mean:.3g} s over "
                    f"{s.num_steps} points): its predictions for other splits rest on the "
                    "assumed parameters"
                )
        return lines


POOR_FIT_R2 = 0.5
"""Below this R², a fit is reported as poor when the measurements also vary clearly..."""
POOR_FIT_RMSE_SHARE = 0.05
"""...by an RMSE of at least this share of their mean (a constant fit to a near-constant
measurement has R² about 0 and is fine)."""

STAGE_FITTERS: tuple[StageFitter, ...] = (fit_rollout, fit_train, fit_sync)


def fit_costs(
    traces: Sequence[Trace],
    *,
    base: CostModels | None = None,
    model: ModelConfig | None = None,
    rollout_tp_size: int = 1,
    sync_bandwidth_gbps: float | None = None,
    extra_fitters: Sequence[StageFitter] = (),
    workloads: Sequence[Workload | WorkloadStream] | None = None,
) -> CostFit:
    """Fit every stage's parameters to the traces; the result's costs are marked calibrated."""
    inputs = gather_inputs(
        traces,
        model=model,
        rollout_tp_size=rollout_tp_size,
        sync_bandwidth_gbps=sync_bandwidth_gbps,
        workloads=workloads,
    )
    costs = base or CostModels()
    stages = []
    for fitter in (*STAGE_FITTERS, *extra_fitters):
        costs, stage_fit = fitter(inputs, costs)
        stages.append(stage_fit)
    costs = costs.model_copy(update={"cost_source": CostSource.CALIBRATED})
    return CostFit(costs=costs, stages=stages, notes=inputs.notes)


def fitted_overrides(fit: CostFit) -> dict:
    """The part of the costs a fit determined, as a mapping `load_costs` accepts."""
    dumped = fit.costs.model_dump(mode="json")
    keep = {s.stage for s in fit.stages} & set(dumped)
    out = {k: dumped[k] for k in sorted(keep)}
    out["cost_source"] = CostSource.CALIBRATED.value
    return out
