"""A resize phase that moves nothing but takes longer the more GPUs a move changes (engines woken
one after another on a shared GPU): the plan adds `s_per_moved_gpu` per GPU changing role, and
calibration recovers it where the records span two such numbers or more."""

from __future__ import annotations

import numpy as np
import pytest
from twin_scenarios import shipped_scenario

from dynaresize.traces.io import Trace
from dynaresize.traces.phases import PhaseName, StrategyName
from dynaresize.traces.schema import RunMeta
from dynaresize.twin.calibration import fit_resize_phases
from dynaresize.twin.calibration.phase_fit import ParamStatus
from dynaresize.twin.costs.memory import ModelConfig
from dynaresize.twin.costs.resize import ResizeCostParams, gpus_changing_role, plan_resize
from dynaresize.twin.simulation import simulate

REINIT = PhaseName.ROLLOUT_REINIT
HOST_GBPS, LINK_GBPS = 25.0, 400.0
# Moves of the example's 8 GPUs: 6:2 -> 5:3 (1 GPU, gains rollout), 5:3 -> 3:5 (2, gains
# rollout), 3:5 -> 6:2 (3, gains training), 6:2 -> 4:4 (2, gains rollout).
SCHEDULE = [
    {"step": 2, "allocation": "5:3"},
    {"step": 5, "allocation": "3:5"},
    {"step": 8, "allocation": "6:2"},
    {"step": 11, "allocation": "4:4"},
]


def with_reinit(base_s: float, s_per_moved_gpu: float) -> ResizeCostParams:
    params = ResizeCostParams()
    phases = dict(params.overlapped)
    phases[REINIT] = phases[REINIT].model_copy(
        update={"base_s": base_s, "s_per_moved_gpu": s_per_moved_gpu}
    )
    return params.model_copy(update={"overlapped": phases})


def plan(params: ResizeCostParams, before: int, after: int):
    return plan_resize(
        strategy=StrategyName.OVERLAPPED,
        model=ModelConfig(num_params_b=8.2),
        params=params,
        host_bandwidth_gbps=HOST_GBPS,
        interconnect_bandwidth_gbps=LINK_GBPS,
        starts_rollout_engines=after < before,
        trainers_before=before,
        trainers_after=after,
    )


def reinit_s(params: ResizeCostParams, before: int, after: int) -> float:
    return next(p.duration_s for p in plan(params, before, after).phases if p.name is REINIT)


def test_a_phase_costs_its_rate_per_gpu_changing_role():
    params = with_reinit(4.0, 1.5)
    assert [gpus_changing_role(6, a) for a in (5, 4, 3)] == [1, 2, 3]
    assert gpus_changing_role(None, 3) == 1
    assert [reinit_s(params, 6, a) for a in (5, 4, 3)] == pytest.approx([5.5, 7.0, 8.5])
    # the rollout re-init runs on moves gaining rollout only, whatever its per-GPU rate
    assert reinit_s(params, 4, 6) == 0.0
    # the critical path grows by the rate for each further GPU
    one, two = plan(params, 6, 5).critical_s, plan(params, 6, 4).critical_s
    flat_one, flat_two = plan(with_reinit(4.0, 0.0), 6, 5), plan(with_reinit(4.0, 0.0), 6, 4)
    assert (two - one) - (flat_two.critical_s - flat_one.critical_s) == pytest.approx(1.5)


def recorded_trace(params: ResizeCostParams) -> Trace:
    scenario = shipped_scenario("example")
    scenario = scenario.model_copy(
        update={
            "cluster": scenario.cluster.model_copy(
                update={"host_bandwidth_gbps": HOST_GBPS, "intra_node_bandwidth_gbps": LINK_GBPS}
            ),
            "costs": scenario.costs.model_copy(update={"resize": params}),
            "simulation": scenario.simulation.model_copy(update={"num_steps": 14}),
        }
    )
    result = simulate(scenario, {"kind": "scheduled", "schedule": SCHEDULE})
    meta = RunMeta(source="twin", model_params_b=scenario.model.num_params_b)
    return Trace(meta=meta, steps=result.steps, resizes=result.resizes).validated()


def fit(trace: Trace):
    return fit_resize_phases(
        [trace],
        model=ModelConfig(num_params_b=8.2),
        host_bandwidth_gbps=HOST_GBPS,
        interconnect_bandwidth_gbps=LINK_GBPS,
    )


def test_calibration_recovers_the_per_gpu_rate_and_predicts_every_move():
    truth = with_reinit(4.0, 1.5)
    result = fit(recorded_trace(truth))
    reinit = next(p for p in result.phases if p.phase is REINIT)
    assert reinit.moved_status is ParamStatus.FITTED
    assert sorted(reinit.moved_gpus_or_none().tolist()) == [1, 2, 2]
    fitted = result.params.overlapped[REINIT]
    assert fitted.s_per_moved_gpu == pytest.approx(1.5, rel=1e-6)
    assert fitted.base_s == pytest.approx(4.0, rel=1e-6)
    assert "s_per_moved_gpu 1.5" in reinit.describe()
    np.testing.assert_allclose(result.critical_path.abs_pct_error, 0.0, atol=1e-4)  # percent
    # a move the records never made (3 GPUs towards rollout) is predicted by the same rate
    assert reinit_s(result.params, 6, 3) == pytest.approx(4.0 + 3 * 1.5, rel=1e-6)


def test_a_phase_that_does_not_grow_with_the_move_fits_no_per_gpu_rate():
    result = fit(recorded_trace(with_reinit(4.0, 0.0)))
    fitted = result.params.overlapped[REINIT]
    assert fitted.s_per_moved_gpu == pytest.approx(0.0, abs=1e-9)
    assert fitted.base_s == pytest.approx(4.0, rel=1e-6)


def test_a_configured_rate_the_records_cannot_determine_is_kept():
    """One move only: the per-GPU rate of a costs file is held and the base fitted beside it."""
    trace = recorded_trace(with_reinit(4.0, 1.5))
    first = trace.resizes[trace.resizes["resize_id"] == 0]
    result = fit_resize_phases(
        [Trace(meta=trace.meta, steps=trace.steps, resizes=first).validated()],
        base=with_reinit(0.0, 1.5),
        model=ModelConfig(num_params_b=8.2),
        host_bandwidth_gbps=HOST_GBPS,
        interconnect_bandwidth_gbps=LINK_GBPS,
    )
    reinit = next(p for p in result.phases if p.phase is REINIT)
    assert reinit.moved_status is ParamStatus.HELD
    fitted = result.params.overlapped[REINIT]
    assert fitted.s_per_moved_gpu == 1.5
    assert fitted.base_s == pytest.approx(4.0, rel=1e-6)
