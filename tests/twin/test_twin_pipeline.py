"""The SimPy pipeline: agreement with the closed-form static recurrences, invariants, lineage."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twin_scenarios import scenario

from dynaresize.traces.phases import PhaseName
from dynaresize.twin.simulation import build_context, simulate
from dynaresize.twin.step_costs import step_time_matrix

MODES = [
    {"mode": "sync"},
    {"mode": "one_step_off"},
    {"mode": "async", "max_staleness_steps": 0},
    {"mode": "async", "max_staleness_steps": 1},
    {"mode": "async", "max_staleness_steps": 3},
]


@pytest.fixture(scope="module", params=MODES, ids=lambda p: "-".join(map(str, p.values())))
def mode_config(request):
    return scenario(pipeline=request.param)


@pytest.mark.parametrize("split", ["6:2", "4:4", "3:5"])
def test_static_run_matches_the_step_time_matrix(mode_config, split):
    cfg = scenario(
        **{**mode_config.model_dump(mode="json"), "cluster": {"initial_allocation": split}}
    )
    ctx = build_context(cfg)
    result = simulate(cfg, {"kind": "static"}, context=ctx)
    column = ctx.step_costs.index(cfg.cluster.initial_allocation)
    matrix = step_time_matrix(
        ctx.workload,
        candidates=cfg.cluster.candidate_allocations,
        cluster=cfg.cluster,
        model=cfg.model,
        costs=cfg.costs,
        pipeline=cfg.pipeline,
    )
    np.testing.assert_allclose(result.steps["step_s"], matrix[:, column], rtol=1e-12, atol=1e-9)
    assert np.isclose(result.summary.total_s, matrix[:, column].sum(), rtol=1e-12)
    static = ctx.baselines.table.set_index("allocation").loc[split]
    assert np.isclose(result.summary.gpu_idle_fraction, static["gpu_idle_fraction"], atol=1e-9)


def test_invariants_under_many_resizes(mode_config):
    result = simulate(mode_config, {"kind": "greedy"})
    steps = result.steps
    assert result.summary.num_resizes > 3
    total = mode_config.cluster.total_gpus
    # GPU count conserved, and the device map agrees with the counts.
    assert (steps["train_gpus"] + steps["rollout_gpus"] == total).all()
    for roles, train in zip(steps["device_roles"], steps["train_gpus"], strict=True):
        assert len(roles) == total and list(roles).count("train") == train
    # A step lasts at least as long as its training stage and sync (and, in sync mode, rollout).
    assert (steps["step_s"] >= steps["train_s"] + steps["sync_s"] - 1e-9).all()
    if mode_config.pipeline.mode.value == "one_step_off":
        # ... and at least as long as the rollout of the next batch, which it overlaps.
        next_rollout = steps["rollout_s"].to_numpy()[1:]
        assert (
            steps["step_s"].to_numpy()[:-1] >= next_rollout + steps["sync_s"].to_numpy()[:-1] - 1e-9
        ).all()
    if mode_config.pipeline.mode.value == "sync":
        assert (
            steps["step_s"] >= steps["rollout_s"] + steps["train_s"] + steps["sync_s"] - 1e-9
        ).all()
    # Steps are consecutive and never overlap; the gaps are exactly the resize stalls.
    assert steps["step"].tolist() == list(range(len(steps)))
    gaps = steps["start_s"].to_numpy()[1:] - steps["end_s"].to_numpy()[:-1]
    assert (gaps >= -1e-9).all()
    assert np.isclose(gaps.sum(), result.summary.resize_time_s)
    assert np.isclose(steps["end_s"].iloc[-1], result.summary.total_s)
    assert (steps["idle_train_gpu_s"] >= 0).all() and (steps["idle_rollout_gpu_s"] >= 0).all()


def test_lineage_one_batch_per_step_and_staleness_unchanged_by_resizes(mode_config):
    static = simulate(mode_config, {"kind": "static"}).steps
    moved = simulate(mode_config, {"kind": "greedy"}).steps
    for steps in (static, moved):
        assert steps["rollout_batch_id"].tolist() == steps["step"].tolist()
        assert steps["rollout_batch_id"].is_unique
    staleness = lambda s: (s["step"] - s["rollout_weights_version"]).to_numpy()  # noqa: E731
    mode = mode_config.pipeline
    if mode.mode.value == "async":
        assert staleness(moved).max() <= mode.max_staleness_steps
        assert staleness(moved).min() >= 0
    else:
        assert np.array_equal(staleness(static), staleness(moved))
        assert set(staleness(moved)) <= ({0} if mode.mode.value == "sync" else {0, 1})


def test_same_seed_same_run_other_seed_differs():
    cfg = scenario()
    a = simulate(cfg, {"kind": "hysteresis"})
    b = simulate(cfg, {"kind": "hysteresis"})
    pd.testing.assert_frame_equal(a.steps, b.steps)
    pd.testing.assert_frame_equal(a.decisions, b.decisions)
    c = simulate(cfg, {"kind": "hysteresis"}, seed=99)
    assert not np.allclose(a.steps["step_s"], c.steps["step_s"])


def test_resize_stalls_for_the_critical_path_and_slows_the_next_step():
    cfg = scenario(costs={"resize": {"background_contention": 0.5}})
    result = simulate(cfg, {"kind": "scheduled", "schedule": "4@4:4"})
    plan = result.context.plan
    steps = result.steps.set_index("step")
    assert np.isclose(steps.loc[5, "start_s"] - steps.loc[4, "end_s"], plan.critical_s)
    assert steps.loc[5, "resize_id"] == 0 and pd.isna(steps.loc[4, "resize_id"])
    assert (steps.loc[:4, "train_gpus"] == 6).all() and (steps.loc[5:, "train_gpus"] == 4).all()
    base_train = result.context.step_costs.train_s[
        5, result.context.step_costs.index(cfg.cluster.candidate_allocations[2])
    ]
    expected = max(base_train + plan.slowdown_s, plan.background_tail_s)
    assert np.isclose(steps.loc[5, "train_s"], expected)
    phases = result.resizes
    assert set(phases["phase"]) == {p.name.value for p in plan.phases}
    critical_end = phases.loc[phases["critical"], "end_s"].max()
    assert np.isclose(critical_end, steps.loc[5, "start_s"])
    assert (phases["from_allocation"] == "6:2").all() and (phases["to_allocation"] == "4:4").all()


@pytest.mark.parametrize("in_flight", ["drain", "abort"])
def test_async_resize_drains_or_aborts_the_batch_in_flight(in_flight):
    # Rollout about twice as slow as training: the trainer waits for batches, so whatever the
    # drawn lengths, a batch is being generated at every boundary.
    cfg = scenario(
        pipeline={"mode": "async", "max_staleness_steps": 2, "in_flight": in_flight},
        costs={"rollout": {"decode_s_per_active_seq": 0.0069}},
    )
    result = simulate(cfg, {"kind": "scheduled", "schedule": "4@4:4"})
    drain = result.resizes[result.resizes["phase"] == PhaseName.ROLLOUT_DRAIN.value]
    assert len(drain) == 1
    span = float(drain["end_s"].iloc[0] - drain["start_s"].iloc[0])
    if in_flight == "drain":
        assert span > 0
        assert np.isclose(result.summary.resize_time_s, span + result.context.plan.critical_s)
    else:
        assert span == 0
        assert np.isclose(result.summary.resize_time_s, result.context.plan.critical_s)
    assert result.steps["rollout_batch_id"].tolist() == list(range(cfg.simulation.num_steps))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode=st.sampled_from(["sync", "one_step_off", "async"]),
    staleness=st.integers(0, 3),
    in_flight=st.sampled_from(["drain", "abort"]),
    seed=st.integers(0, 10_000),
    schedule=st.lists(st.sampled_from(["6:2", "5:3", "4:4", "3:5"]), min_size=1, max_size=4),
)
def test_random_schedules_keep_every_invariant(mode, staleness, in_flight, seed, schedule):
    cfg = scenario(
        pipeline={"mode": mode, "max_staleness_steps": staleness, "in_flight": in_flight},
        simulation={"num_steps": 12, "seed": seed},
        workload={"samples_per_step": 8},
    )
    plan = ";".join(f"{2 * i + 1}@{split}" for i, split in enumerate(schedule))
    result = simulate(cfg, {"kind": "scheduled", "schedule": plan})
    steps = result.steps
    assert steps["rollout_batch_id"].tolist() == list(range(12))
    assert (steps["train_gpus"] + steps["rollout_gpus"] == 8).all()
    assert (steps["step_s"] >= steps["train_s"] + steps["sync_s"] - 1e-9).all()
    staleness_seen = steps["step"] - steps["rollout_weights_version"]
    bound = {"sync": 0, "one_step_off": 1, "async": staleness}[mode]
    assert staleness_seen.between(0, bound).all()
    gaps = steps["start_s"].to_numpy()[1:] - steps["end_s"].to_numpy()[:-1]
    assert (gaps >= -1e-9).all() and np.isclose(gaps.sum(), result.summary.resize_time_s)
    # Every resize lands on its target: the split after it is the scheduled one.
    for rid, group in result.resizes.groupby("resize_id"):
        after = steps[steps["resize_id"] == rid]
        assert len(after) == 1
        target = group["to_allocation"].iloc[0]
        assert f"{after['train_gpus'].iloc[0]}:{after['rollout_gpus'].iloc[0]}" == target
