"""Lending the trainers' GPUs within a step, in every pipeline mode.

A pipeline that can lend but is never asked to is the whole-batch pipeline, record for record;
lending that costs nothing never makes a step end later; a gate facing a huge switch cost never
fires; the records say when, how much and at what cost GPUs were lent.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from twin_scenarios import scenario

from dynaresize.policies import Decision, LendAction, StepObservation
from dynaresize.twin.simulation import build_context, simulate

MODES = [
    {"mode": "sync"},
    {"mode": "one_step_off"},
    {"mode": "async", "max_staleness_steps": 0},
    {"mode": "async", "max_staleness_steps": 1},
]
IDS = ["sync", "one_step_off", "async0", "async1"]
FREE_SWITCH = {
    "activate": {"base_s": 0.0, "s_per_gb": 0.0},
    "deactivate": {"base_s": 0.0, "s_per_gb": 0.0},
}
HUGE_SWITCH = {"activate": {"base_s": 1.0e6}, "deactivate": {"base_s": 1.0e6}}
# Few slots per replica, so that a batch keeps requests waiting for one: what lent replicas
# take over without aborting anything.
QUEUED = {"max_num_seqs_per_replica": 2}
LENDING_COLUMNS = ["lent_gpus", "lend_start_s", "lend_end_s", "lend_switch_s"]


class AlwaysLend:
    """A gate that lends at every wait, until the whole batch is out."""

    def decide(self, obs: StepObservation) -> Decision:
        assert obs.lending is not None, "the pipeline offers lending"
        return Decision.hold("always", lend=LendAction())

    def reset(self) -> None:
        return None


def _without_lending_columns(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in (*LENDING_COLUMNS, "lend") if c in frame])


@pytest.mark.parametrize("mode", MODES, ids=IDS)
@pytest.mark.parametrize("policy", ["static", "greedy"])
def test_a_pipeline_that_can_lend_but_never_does_is_todays(mode, policy):
    plain = scenario(pipeline=mode)
    lending = scenario(pipeline={**mode, "lending": True})
    context = build_context(plain)
    a = simulate(plain, {"kind": policy}, context=context)
    b = simulate(lending, {"kind": policy}, context=context)
    for table in ("steps", "resizes", "decisions"):
        pd.testing.assert_frame_equal(
            _without_lending_columns(getattr(a, table)),
            _without_lending_columns(getattr(b, table)),
            check_exact=True,
        )
    assert (b.steps["lent_gpus"] == 0).all() and a.steps["lent_gpus"].isna().all()
    assert not b.decisions["lend"].any()


@pytest.mark.parametrize("mode", MODES, ids=IDS)
@pytest.mark.parametrize("split", ["6:2", "4:4"])
def test_free_lending_at_every_wait_never_makes_a_step_end_later(mode, split):
    """Activate and deactivate free, requests in flight left where they are: the lent replicas
    only take requests still waiting for a slot, so no batch is done later and no step ends
    later than on the static split; some end earlier."""
    pipeline = {**mode, "lending": True, "partial_rollout": True, "lending_rebalance": False}
    config = scenario(
        pipeline=pipeline,
        cluster={"initial_allocation": split},
        costs={"resize": FREE_SWITCH, "rollout": QUEUED},
    )
    context = build_context(config)
    static = simulate(config, {"kind": "static"}, context=context)
    lent = simulate(config, AlwaysLend(), context=context)
    assert (lent.steps["end_s"].to_numpy() <= static.steps["end_s"].to_numpy() + 1e-9).all()
    assert lent.summary.total_s < static.summary.total_s
    assert (lent.steps["lent_gpus"] > 0).sum() > 0


@pytest.mark.parametrize("mode", MODES, ids=IDS)
@pytest.mark.parametrize(
    "policy",
    [
        {"kind": "verl_drc", "default_switch_cost_s": 1.0e6},
        {"kind": "verl_switch"},
        {"kind": "hysteresis", "consecutive_signals": 1},
        {"kind": "payback"},
    ],
    ids=["verl_drc", "verl_switch", "hysteresis", "payback"],
)
def test_with_a_huge_switch_cost_the_gate_never_fires(mode, policy):
    """A switch of a million seconds outweighs any wait: no rule lends (verl_switch's cold
    start lends once, as veRL's does, then knows the cost and never again)."""
    config = scenario(
        pipeline={**mode, "lending": True, "partial_rollout": True},
        cluster={"initial_allocation": "6:2"},
        costs={"resize": HUGE_SWITCH},
    )
    result = simulate(config, policy, context=build_context(config))
    lends = int((result.steps["lent_gpus"] > 0).sum())
    assert lends <= (1 if policy["kind"] == "verl_switch" else 0)
    assert int(result.decisions["lend"].sum()) == lends


def test_lending_records_say_when_how_much_and_at_what_cost():
    config = scenario(
        pipeline={"mode": "one_step_off", "lending": True, "partial_rollout": True},
        cluster={"initial_allocation": "6:2"},
    )
    context = build_context(config)
    result = simulate(config, AlwaysLend(), context=context)
    steps = result.steps
    lent = steps["lent_gpus"] > 0
    assert lent.any()
    plan = context.lend_plan
    assert (steps.loc[lent, "lent_gpus"] == steps.loc[lent, "train_gpus"]).all()
    assert np.allclose(steps.loc[lent, "lend_switch_s"], plan.activate_s + plan.deactivate_s)
    inside = (steps["lend_start_s"] >= steps["start_s"] - 1e-9) & (
        steps["lend_end_s"] <= steps["end_s"] + 1e-9
    )
    assert inside[lent].all()
    assert steps.loc[~lent, ["lend_start_s", "lend_end_s"]].isna().all().all()
    # every decision but the last step's asked to lend
    assert result.decisions["lend"].all()
    assert result.samples is not None and result.samples["finish_s"].notna().all()
