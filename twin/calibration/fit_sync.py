"""The weight sync's fit: the fixed latency (and, if needed, the per-GB rate) so that the model's
sync time matches the measured one for the model's weights over the configured link, and what
each further receiving replica adds where the traces show several replica counts.
"""

from __future__ import annotations

import numpy as np

from ..costs import CostModels
from ..costs.sync import SyncCostParams, weight_sync_s
from .fit_quality import fit_nonnegative_line
from .stage_fit import FitInputs, StageFit, rollout_replicas_per_step


def fit_sync(inputs: FitInputs, costs: CostModels) -> tuple[CostModels, StageFit]:
    measured_all = inputs.steps["sync_s"].to_numpy(np.float64)
    has_sync = measured_all > 0
    measured = measured_all[has_sync]
    replicas = rollout_replicas_per_step(inputs.steps, inputs.rollout_tp_size, of_batch=False)[
        has_sync
    ]
    base = costs.sync
    weights_gb = inputs.model.weights_gb
    bandwidth = inputs.sync_bandwidth_gbps
    assumptions = []
    if len(measured) == 0:
        fitted = base
        assumptions.append("no step records a weight-sync time: sync parameters left unchanged")
    else:
        fitted, how = _fit_sync_params(measured, replicas, base, weights_gb, bandwidth)
        assumptions.append(how)
    predicted = np.array(
        [
            weight_sync_s(
                weights_gb=weights_gb, bandwidth_gbps=bandwidth, params=fitted, num_replicas=int(r)
            )
            for r in replicas
        ]
    )
    fit = StageFit(
        stage="sync",
        params=fitted.model_dump(),
        measured_s=measured,
        predicted_s=predicted,
        assumptions=assumptions,
    )
    return costs.model_copy(update={"sync": fitted}), fit


def _fit_sync_params(
    measured: np.ndarray,
    replicas: np.ndarray,
    base: SyncCostParams,
    weights_gb: float,
    bandwidth: float,
) -> tuple[SyncCostParams, str]:
    """One weight size and one link: the time of a sync to one replica is fitted (as latency,
    or as per-GB gathering where the measured time is below the configured link time), and,
    where the trace shows several replica counts, what each further receiver adds."""
    extra = replicas.astype(np.float64) - 1.0
    if len(np.unique(replicas)) >= 2:
        line = fit_nonnegative_line(extra, measured)
        one_replica_s, per_extra_s = line.intercept, line.slope
        how = (
            f"one weight size ({weights_gb:.3g} GB) and one link ({bandwidth:g} GB/s): the sync "
            f"to one replica and each further replica's share are fitted over "
            f"{len(np.unique(replicas))} replica counts"
        )
    else:
        one_replica_s, per_extra_s = float(np.median(measured)), base.extra_replica_s_per_gb
        per_extra_s *= weights_gb
        how = (
            f"one weight size ({weights_gb:.3g} GB), one link ({bandwidth:g} GB/s) and one replica "
            "count: only the fixed latency is fitted, to the median measured sync time"
        )
    link_s = weights_gb / (bandwidth * base.link_efficiency)
    gather_part_s = weights_gb * base.gather_s_per_gb
    update: dict[str, float] = {"extra_replica_s_per_gb": per_extra_s / max(weights_gb, 1e-12)}
    if one_replica_s >= link_s + gather_part_s:
        update["latency_s"] = one_replica_s - link_s - gather_part_s
    else:
        update["latency_s"] = 0.0
        update["gather_s_per_gb"] = max(0.0, (one_replica_s - link_s) / weights_gb)
    return base.model_copy(update=update), how
