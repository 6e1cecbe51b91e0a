"""Sweeps batched by context: every run's figures equal `simulate()`'s, bit for bit, whether its
policy kind is advanced in lockstep with the others of its group or simulated on its own.

Every kind in the policy registry is covered (a kind added later is too: it runs at its defaults,
or the test asks for an example of it in VARIANTS).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twin_scenarios import scenario

from dynaresize.policies.registry import parse_policy_config, policy_kinds
from dynaresize.twin.config import ScenarioConfig
from dynaresize.twin.simulation import build_context, simulate
from dynaresize.twin.sweeps import tasks as sweep_tasks
from dynaresize.twin.sweeps.plan import MIN_GROUP_RUNS, plan_sweep
from dynaresize.twin.sweeps.tasks import (
    RUN_MEASURES,
    BaselineTask,
    GroupTask,
    RunTask,
    evaluate_group,
)
from dynaresize.twin.sweeps.vector_policies import VECTOR_POLICIES

VARIANTS: dict[str, list[dict]] = {
    "scheduled": [{"schedule": "3@4:4;9@6:2;10@3:5;20@3:5;40@5:3"}],
    "greedy": [{}, {"deadband": 0.2}, {"move_mode": "predicted_best"}],
    "hysteresis": [
        {},
        {
            "cooldown_steps": 0,
            "up_threshold": 0.05,
            "down_threshold": 0.05,
            "consecutive_signals": 1,
            "dwell_steps": 0,
        },
        {"move_mode": "predicted_best", "cooldown_steps": 2, "smoothing_alpha": 1.0},
        {"up_threshold": 0.3, "down_threshold": 0.02, "dwell_steps": 8},
    ],
    "payback": [
        {},
        {"horizon_steps": 5, "margin": 1.0},
        {"horizon_steps": 400, "cap_horizon_at_remaining_steps": False},
    ],
}
"""Settings each kind runs at; a kind not listed runs at its defaults."""


def _policies() -> list:
    policies = []
    for kind in policy_kinds():
        for settings_ in VARIANTS.get(kind, [{}]):
            try:
                policies.append(parse_policy_config({"kind": kind, **settings_}))
            except ValueError as err:
                pytest.fail(f"policy kind {kind!r} needs an example in VARIANTS: {err}")
    return policies


def _group(config: ScenarioConfig, policies: list, name: str) -> GroupTask:
    context = BaselineTask(
        key=f"batched-test-{name}",
        config_json=config.model_copy(update={"policies": []}).model_dump_json(),
        trace_path=None,
        seed=config.simulation.seed,
    )
    runs = tuple(RunTask(f"run-{i}", p.model_dump_json()) for i, p in enumerate(policies))
    return GroupTask(context, runs, with_baseline=True)


def _same(row: dict, config: ScenarioConfig, policy, context) -> None:
    """The row's measures are exactly those of `simulate()` on the same context."""
    summary = simulate(config, policy, context=context).summary
    for column, (field, _) in RUN_MEASURES.items():
        assert row[column] == getattr(summary, field), (policy, column)
    assert row["named_baseline_allocation"] == (summary.baseline_allocation or "")
    expected = summary.speedup_vs_baseline
    got = row["speedup_vs_named_baseline"]
    assert (math.isnan(got) and expected is None) or got == expected, policy


@pytest.mark.parametrize(
    "mode, strategy",
    [("one_step_off", "overlapped"), ("sync", "stop_and_rebuild"), ("async", "overlapped")],
)
def test_every_policy_kind_gives_what_simulate_gives(mode, strategy, monkeypatch):
    config = scenario(
        pipeline={"mode": mode, "resize_strategy": strategy},
        simulation={"num_steps": 60, "baseline_allocation": "6:2"},
    )
    policies = _policies()
    simulated = []
    original = sweep_tasks.simulate

    def counting(cfg, policy, **kwargs):
        simulated.append(str(policy.kind))
        return original(cfg, policy, **kwargs)

    monkeypatch.setattr(sweep_tasks, "simulate", counting)
    done = evaluate_group(_group(config, policies, f"{mode}-{strategy}"))
    monkeypatch.undo()
    assert done["baseline"] is not None and len(done["runs"]) == len(policies)
    context = build_context(config)
    for row, policy in zip(done["runs"], policies, strict=True):
        assert row["key"] == f"run-{policies.index(policy)}"
        _same(row, config, policy, context)
    # the runs of kinds with a vectorised form were advanced together, not simulated
    lockstep = mode != "async"
    expected = [str(p.kind) for p in policies if not (lockstep and p.kind in VECTOR_POLICIES)]
    assert simulated == expected
    # and they moved: a test of holding policies would prove little
    moved = zip(done["runs"], policies, strict=True)
    resized = {str(p.kind) for row, p in moved if row["num_resizes"] > 0}
    assert resized >= {"scheduled", "greedy", "hysteresis", "payback"}


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(["greedy", "hysteresis", "payback"]),
    mode=st.sampled_from(["one_step_off", "sync"]),
    seed=st.integers(0, 50),
    knobs=st.tuples(
        st.integers(0, 10), st.floats(0.01, 0.5), st.floats(0.01, 0.5), st.floats(0.1, 1.0)
    ),
    by_prediction=st.booleans(),
)
def test_random_settings_match_simulate(kind, mode, seed, knobs, by_prediction):
    count, low, high, alpha = knobs
    move_mode = "predicted_best" if by_prediction else "one_notch"
    settings_ = {
        "greedy": {"deadband": low, "move_mode": move_mode},
        "hysteresis": {
            "cooldown_steps": count,
            "up_threshold": low,
            "down_threshold": high,
            "smoothing_alpha": alpha,
            "consecutive_signals": 1 + count % 3,
            "dwell_steps": count // 2,
            "move_mode": move_mode,
        },
        "payback": {"horizon_steps": 1 + 8 * count, "margin": 1.0 + high},
    }[kind]
    config = scenario(pipeline={"mode": mode}, simulation={"num_steps": 40, "seed": seed})
    policies = [
        parse_policy_config({"kind": kind, **settings_}),
        parse_policy_config({"kind": kind}),
    ]
    done = evaluate_group(_group(config, policies, f"random-{kind}-{mode}-{seed}"))
    context = build_context(config)
    for row, policy in zip(done["runs"], policies, strict=True):
        _same(row, config, policy, context)


def test_groups_cover_each_pending_run_once_with_one_baseline_per_context():
    config = scenario(policies=[{"kind": "static"}, {"kind": "hysteresis"}])
    cooldowns = ",".join(str(c) for c in range(41))
    plan = plan_sweep(
        config,
        params=[f"policy.cooldown_steps={cooldowns}", "policy.up_threshold=0.1,0.2"],
        seeds=3,
    )
    everything = {p.run.key for p in plan.runs}
    batches = sum(
        len({p.run.key for p in plan.runs if p.baseline.key == b.key}) // MIN_GROUP_RUNS
        for b in plan.baselines()
    )
    for workers in (1, 2, 7):
        groups = plan.groups(runs_done=set(), baselines_done=set(), num_workers=workers)
        keys = [run.key for g in groups for run in g.runs]
        assert sorted(keys) == sorted(everything)
        assert [g.context.key for g in groups if g.with_baseline] == [
            b.key for b in plan.baselines()
        ]
        for g in groups:  # a group's runs share its context, and are not too few to batch
            runs = {p.run.key for p in plan.runs if p.baseline.key == g.context.key}
            assert {r.key for r in g.runs} <= runs
            assert len(g.runs) >= min(len(runs), MIN_GROUP_RUNS)
        assert len(groups) >= min(2 * workers, batches)  # every worker has work
    done = set(sorted(everything)[::2])
    first = plan.baselines()[0].key
    groups = plan.groups(runs_done=done, baselines_done={first}, num_workers=2)
    assert sorted(r.key for g in groups for r in g.runs) == sorted(everything - done)
    assert first not in [g.context.key for g in groups if g.with_baseline]


def test_a_pipeline_setting_the_lockstep_does_not_model_sends_runs_to_simulate(monkeypatch):
    from dynaresize.twin.sweeps import lockstep

    config = scenario(pipeline={"resize_strategy": "stop_and_rebuild"})
    assert lockstep.lockstep_supported(config)
    assert not lockstep.lockstep_supported(scenario(pipeline={"mode": "async"}))
    # a setting it does not know of, away from its default, is not modelled
    unknown = {"pipeline": {"mode", "max_staleness_steps", "in_flight"}}
    monkeypatch.setattr(lockstep, "MODELLED_SETTINGS", unknown)
    assert not lockstep.lockstep_supported(config)
    assert lockstep.lockstep_supported(scenario())  # at its default, it is
