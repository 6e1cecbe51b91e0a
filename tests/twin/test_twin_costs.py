"""Cost models: closed forms of train and sync, the resize DAG and its paper defaults."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from analysis_traces import with_phase_updates
from twin_scenarios import shipped_scenario

from dynaresize.config_io import ConfigError
from dynaresize.policies.types import Allocation, CostSource
from dynaresize.traces.phases import PhaseName, StrategyName
from dynaresize.twin.costs import CostModels, load_costs
from dynaresize.twin.costs.memory import ModelConfig
from dynaresize.twin.costs.resize import (
    Link,
    MoveDirection,
    MovedShare,
    PhaseCostParams,
    ResizeCostParams,
    StateMoved,
    changed_owner_fraction,
    plan_resize,
    plan_resizes,
)
from dynaresize.twin.costs.resize_strategies import STRATEGY_COSTS
from dynaresize.twin.costs.sync import SyncCostParams, weight_sync_s
from dynaresize.twin.costs.train import TrainCostParams, train_stage_s

PAPER_MODEL = ModelConfig(num_params_b=8.2)


def plan(strategy, *, model=PAPER_MODEL, params=None, host=25.0, link=400.0):
    return plan_resize(
        strategy=strategy,
        model=model,
        params=params or ResizeCostParams(),
        host_bandwidth_gbps=host,
        interconnect_bandwidth_gbps=link,
    )


def test_train_closed_form():
    params = TrainCostParams(
        s_per_token_one_gpu=1e-4,
        scaling_efficiency_per_doubling=0.9,
        fixed_overhead_s=2.0,
        optimizer_s_per_gb_shard=0.1,
    )
    model = ModelConfig(num_params_b=1, master_bytes_per_param=4, optimizer_bytes_per_param=8)
    tokens = np.array([0.0, 1e5, 4e5])
    got = train_stage_s(tokens, train_gpus=4, model=model, params=params)
    # efficiency(4) = 0.9**2; optimizer state 12 GB over 4 GPUs at 0.1 s/GB.
    expected = 2.0 + tokens * 1e-4 / (4 * 0.81) + 0.1 * 12 / 4
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_more_trainers_never_slower_when_scaling_is_linear():
    params = TrainCostParams(scaling_efficiency_per_doubling=1.0)
    times = [
        float(train_stage_s(1e6, train_gpus=n, model=PAPER_MODEL, params=params)) for n in (2, 4, 6)
    ]
    assert times == sorted(times, reverse=True)


def test_sync_closed_form():
    params = SyncCostParams(latency_s=0.5, gather_s_per_gb=0.2, link_efficiency=0.5)
    got = weight_sync_s(weights_gb=10, bandwidth_gbps=100, params=params)
    assert math.isclose(got, 0.5 + 10 * (0.2 + 1 / 50))


def test_resize_defaults_reproduce_the_paper_breakdown():
    rebuild = plan(StrategyName.STOP_AND_REBUILD)
    overlapped = plan(StrategyName.OVERLAPPED)
    assert math.isclose(rebuild.critical_s, 254.8, abs_tol=1e-9)
    assert math.isclose(overlapped.critical_s, 187.2, abs_tol=1e-9)
    hidden = 1 - overlapped.critical_s / rebuild.critical_s
    assert 0.26 < hidden < 0.28  # "hides 27%"
    assert rebuild.background_tail_s == 0 and rebuild.slowdown_s == 0
    names = {p.name for p in overlapped.phases if not p.critical}
    assert names == {PhaseName.COMM_PREWARM, PhaseName.OPTIMIZER_RESTORE}


def test_deferred_optimizer_restore_overlaps_the_next_step():
    params = ResizeCostParams(background_contention=0.5)
    p = plan(StrategyName.OVERLAPPED, params=params)
    restore = next(x for x in p.phases if x.name is PhaseName.OPTIMIZER_RESTORE)
    assert restore.start_s >= p.critical_s - 1e-9  # starts at the boundary
    assert math.isclose(p.background_tail_s, restore.duration_s)
    assert math.isclose(p.slowdown_s, 0.5 * restore.duration_s)
    assert restore.bytes_moved == int(PAPER_MODEL.optimizer_state_gb * 1e9)


def test_resize_scales_with_bytes_and_bandwidth():
    base = plan(StrategyName.STOP_AND_REBUILD)
    doubled = plan(StrategyName.STOP_AND_REBUILD, model=ModelConfig(num_params_b=16.4))
    per_gb = ResizeCostParams().stop_and_rebuild
    gb = {
        StateMoved.NONE: 0.0,
        StateMoved.WEIGHTS: PAPER_MODEL.weights_gb,
        StateMoved.OPTIMIZER_STATE: PAPER_MODEL.optimizer_state_gb,
        StateMoved.TRAIN_STATE: PAPER_MODEL.train_state_gb,
    }
    byte_part = sum(p.s_per_gb * gb[p.moves] for p in per_gb.values())
    assert math.isclose(doubled.critical_s - base.critical_s, byte_part, rel_tol=1e-9)
    host_part = sum(p.s_per_gb * gb[p.moves] for p in per_gb.values() if p.link is Link.HOST)
    slow_host = plan(StrategyName.STOP_AND_REBUILD, host=12.5)
    assert math.isclose(slow_host.critical_s - base.critical_s, host_part, rel_tol=1e-9)


def test_critical_path_is_the_longest_path_not_the_sum():
    phases = {
        PhaseName.STATE_EXPORT: PhaseCostParams(base_s=10),
        PhaseName.WORKER_REINIT: PhaseCostParams(base_s=30, depends_on=[PhaseName.STATE_EXPORT]),
        PhaseName.ROLLOUT_REINIT: PhaseCostParams(base_s=5, depends_on=[PhaseName.STATE_EXPORT]),
        PhaseName.COMM_PREWARM: PhaseCostParams(base_s=50, critical=False),
        PhaseName.WEIGHT_SYNC: PhaseCostParams(
            base_s=1, depends_on=[PhaseName.WORKER_REINIT, PhaseName.ROLLOUT_REINIT]
        ),
    }
    params = ResizeCostParams(overlapped=phases)
    p = plan(StrategyName.OVERLAPPED, params=params)
    assert math.isclose(p.critical_s, 41.0)  # 10 + 30 + 1
    assert math.isclose(p.background_tail_s, 9.0)  # prewarm ends at 50
    # A critical phase that waits on a background one inherits its length.
    phases[PhaseName.WEIGHT_SYNC] = PhaseCostParams(
        base_s=1, depends_on=[PhaseName.WORKER_REINIT, PhaseName.COMM_PREWARM]
    )
    p = plan(StrategyName.OVERLAPPED, params=ResizeCostParams(overlapped=phases))
    assert math.isclose(p.critical_s, 51.0)


def test_cycles_and_unknown_dependencies_are_rejected():
    cyclic = {
        PhaseName.STATE_EXPORT: PhaseCostParams(base_s=1, depends_on=[PhaseName.WEIGHT_SYNC]),
        PhaseName.WEIGHT_SYNC: PhaseCostParams(base_s=1, depends_on=[PhaseName.STATE_EXPORT]),
    }
    with pytest.raises(ValueError, match="cycle"):
        ResizeCostParams(overlapped=cyclic)
    dangling = {
        PhaseName.WEIGHT_SYNC: PhaseCostParams(base_s=1, depends_on=[PhaseName.POSTPROCESS])
    }
    with pytest.raises(ValueError, match="postprocess"):
        ResizeCostParams(stop_and_rebuild=dangling)


def test_costs_file_overrides_only_what_it_names(tmp_path):
    path = tmp_path / "costs.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "train": {"fixed_overhead_s": 3.5},
                "resize": {"overlapped": {"worker_reinit": {"base_s": 1.0}}},
            }
        )
    )
    base = CostModels()
    costs = load_costs(path, base=base)
    assert costs.train.fixed_overhead_s == 3.5
    assert costs.train.s_per_token_one_gpu == base.train.s_per_token_one_gpu
    assert costs.resize.overlapped[PhaseName.WORKER_REINIT].base_s == 1.0
    assert (
        costs.resize.overlapped[PhaseName.STATE_EXPORT]
        == base.resize.overlapped[PhaseName.STATE_EXPORT]
    )
    assert costs.rollout == base.rollout
    assert costs.cost_source is CostSource.CALIBRATED
    path.write_text("train: {fixed_overhead_s: -1}\n")
    with pytest.raises(ConfigError, match=r"costs.yaml: train.fixed_overhead_s"):
        load_costs(path)


def test_coordination_adds_to_every_critical_path():
    params = ResizeCostParams()
    with_coordination = params.model_copy(update={"coordination_s": 0.5})
    for strategy in (StrategyName.OVERLAPPED, StrategyName.STOP_AND_REBUILD):
        for engines in (True, False):
            kwargs = {
                "strategy": strategy,
                "model": PAPER_MODEL,
                "host_bandwidth_gbps": 25.0,
                "interconnect_bandwidth_gbps": 400.0,
                "starts_rollout_engines": engines,
            }
            plain = plan_resize(params=params, **kwargs)
            more = plan_resize(params=with_coordination, **kwargs)
            assert more.critical_s == pytest.approx(plain.critical_s + 0.5)


def test_ring_allreduce_costs_nothing_on_one_gpu_and_plateaus():
    params = TrainCostParams(
        s_per_token_one_gpu=0.0,
        fixed_overhead_s=0.0,
        optimizer_s_per_gb_shard=0.0,
        allreduce_s_per_gb=1.0,
    )
    times = [
        float(train_stage_s(0.0, train_gpus=n, model=PAPER_MODEL, params=params)) for n in (1, 2, 8)
    ]
    grads = PAPER_MODEL.gradients_gb
    assert times == pytest.approx([0.0, grads, 1.75 * grads])


def test_warmup_is_paid_by_a_run_s_first_step_only():
    """The first step of a run pays the one-time warm-ups; costing a step mid-run (the live
    estimator) does not; contention stretches the rollout of several replicas sharing a device."""
    from dynaresize.policies.types import Allocation
    from dynaresize.traces.workload import Workload
    from dynaresize.twin.step_costs import stage_time_components

    scenario = shipped_scenario("example")
    rng = np.random.default_rng(0)
    workload = Workload.from_steps(
        [rng.integers(10, 50, 16) for _ in range(3)], [rng.integers(1, 400, 16) for _ in range(3)]
    )
    candidates = [
        Allocation(train_gpus=6, rollout_gpus=2),
        Allocation(train_gpus=4, rollout_gpus=4),
    ]
    kwargs = {"candidates": candidates, "cluster": scenario.cluster, "model": scenario.model}
    plain = stage_time_components(workload, costs=scenario.costs, **kwargs)
    costs = scenario.costs.with_overrides(
        {
            "rollout": {"first_step_warmup_s": 2.0, "replica_contention_per_extra": 0.5},
            "train": {"first_step_warmup_s": 3.0},
        }
    )
    warm = stage_time_components(workload, costs=costs, **kwargs)
    mid_run = stage_time_components(workload, costs=costs, starts_run=False, **kwargs)
    replicas = np.array([scenario.cluster.num_rollout_replicas(c) for c in candidates])
    stretch = 1 + 0.5 * (replicas - 1)
    np.testing.assert_allclose(mid_run[0], plain[0] * stretch)
    np.testing.assert_allclose(mid_run[1], plain[1])
    np.testing.assert_allclose(warm[0][0], plain[0][0] * stretch + 2.0)
    np.testing.assert_allclose(warm[0][1:], plain[0][1:] * stretch)
    np.testing.assert_allclose(warm[1][0], plain[1][0] + 3.0)
    np.testing.assert_allclose(warm[1][1:], plain[1][1:])


def test_policy_predictions_leave_the_one_time_warmup_out():
    """The warm-up is paid whatever the split, so the step times a policy compares splits by are
    those without it, while the run itself pays it once."""
    from dynaresize.twin.simulation import build_context

    scenario = shipped_scenario("example")
    plain = build_context(scenario, seed=1)
    warm_costs = scenario.costs.with_overrides(
        {"rollout": {"first_step_warmup_s": 30.0}, "train": {"first_step_warmup_s": 50.0}}
    )
    warm = build_context(scenario, costs=warm_costs, seed=1)
    np.testing.assert_allclose(warm.predicted_step_s, plain.predicted_step_s)
    assert warm.step_costs.static_totals_s() == pytest.approx(
        plain.step_costs.static_totals_s()
        + (warm.step_costs.step_s[0] - plain.step_costs.step_s[0])
    )
    assert np.all(warm.step_costs.step_s[0] > plain.step_costs.step_s[0])


@pytest.mark.parametrize(
    ("before", "after", "share"),
    [(2, 1, 1 / 2), (1, 2, 1 / 2), (2, 3, 1 / 2), (1, 3, 2 / 3), (3, 1, 2 / 3), (4, 4, 0.0)],
)
def test_changed_owner_fraction_closed_forms(before, after, share) -> None:
    assert changed_owner_fraction(before, after) == pytest.approx(share)


def test_a_recut_phase_moves_its_share_and_a_one_direction_phase_only_its_moves() -> None:
    """A re-cut moves only the changed-owner share of the master weights; a phase restricted to
    moves gaining training costs nothing on a move towards rollout; plans differ by move."""
    params = with_phase_updates(
        ResizeCostParams(),
        StrategyName.OVERLAPPED,
        {
            PhaseName.WEIGHT_RESTORE: {
                "moves": StateMoved.MASTER_WEIGHTS,
                "share": MovedShare.CHANGED_OWNER,
            },
            PhaseName.WORKER_REINIT: {"on_moves": MoveDirection.GAINING_TRAINING},
        },
    )
    plans = plan_resizes(
        strategy=StrategyName.OVERLAPPED,
        model=PAPER_MODEL,
        params=params,
        host_bandwidth_gbps=25.0,
        interconnect_bandwidth_gbps=400.0,
    )
    alloc = Allocation.parse

    def phase(plan_, name):
        return next(p for p in plan_.phases if p.name is name)

    to_training = plans.between(alloc("4:4"), alloc("6:2"))
    to_rollout = plans.between(alloc("6:2"), alloc("4:4"))
    master_gb = 8.2 * 4
    restore = phase(to_training, PhaseName.WEIGHT_RESTORE)
    assert restore.bytes_moved == pytest.approx(0.75 * master_gb * 1e9, rel=1e-9)
    spec = params.overlapped[PhaseName.WEIGHT_RESTORE]
    assert restore.duration_s == pytest.approx(spec.base_s + spec.s_per_gb * 0.75 * master_gb)
    assert phase(to_training, PhaseName.WORKER_REINIT).duration_s == pytest.approx(32.6)
    assert phase(to_rollout, PhaseName.WORKER_REINIT).duration_s == 0.0
    assert phase(to_training, PhaseName.ROLLOUT_REINIT).duration_s == 0.0
    assert phase(to_rollout, PhaseName.ROLLOUT_REINIT).duration_s == pytest.approx(25.9)
    # a one-notch move re-cuts less than a large one
    small = phase(plans.between(alloc("4:4"), alloc("5:3")), PhaseName.WEIGHT_RESTORE)
    large = phase(plans.between(alloc("1:7"), alloc("7:1")), PhaseName.WEIGHT_RESTORE)
    assert small.bytes_moved < large.bytes_moved
    # without trainer counts a re-cut phase moves the whole state (one plan per direction)
    assert phase(plans.gains_rollout, PhaseName.WEIGHT_RESTORE).bytes_moved == pytest.approx(
        master_gb * 1e9
    )


def test_every_strategy_reads_its_phase_table_from_the_one_strategy_table() -> None:
    """Each strategy's row names a phase table of `ResizeCostParams`; a derived row (host_sync)
    is its table with every phase on the critical path, and `calibrate` leaves it unfitted."""
    params = ResizeCostParams()
    assert set(STRATEGY_COSTS) == set(StrategyName)
    for strategy, costs in STRATEGY_COSTS.items():
        table = getattr(params, costs.table)
        phases = params.phases(strategy)
        assert set(phases) == set(table)
        if costs.every_phase_critical:
            assert not costs.fitted and all(p.critical for p in phases.values())
            for name, phase in phases.items():
                assert phase.base_s == table[name].base_s and phase.s_per_gb == table[name].s_per_gb
        else:
            assert costs.fitted
            assert {n for n, p in phases.items() if p.critical} == {
                n for n, p in table.items() if p.critical
            }
    # nothing of host_sync overlaps: its stall is the overlapped stall plus the background work
    host_sync, overlapped = plan(StrategyName.HOST_SYNC), plan(StrategyName.OVERLAPPED)
    assert host_sync.background_tail_s == 0 and host_sync.critical_s > overlapped.critical_s
