"""`scheduled` resizes exactly at its steps, to its allocations."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_observations import EIGHT_GPU_SPLITS, make_obs, run_closed_loop

from dynaresize.policies import build_policy


@st.composite
def schedules(draw):
    steps = sorted(draw(st.sets(st.integers(0, 40), min_size=1, max_size=8)))
    labels, previous = [], "6:2"
    for _ in steps:  # each entry differs from the allocation in place before it
        label = draw(st.sampled_from([s for s in EIGHT_GPU_SPLITS if s != previous]))
        labels.append(label)
        previous = label
    return list(zip(steps, labels, strict=True))


@settings(max_examples=60, deadline=None)
@given(schedule=schedules())
def test_resizes_exactly_at_its_steps_to_its_allocations(schedule):
    config = {"kind": "scheduled", "schedule": [{"step": s, "allocation": a} for s, a in schedule]}
    record = run_closed_loop(
        build_policy(config), lambda step, a: (30.0, 20.0), start="6:2", num_steps=45
    )
    assert record.resize_steps == [s for s, _ in schedule]
    assert [t.label for t in record.targets] == [a for _, a in schedule]
    for step, label in schedule:  # in effect from the next step on
        if step + 1 < 45:
            assert record.allocations[step + 1].label == label


def test_a_scheduled_allocation_already_in_place_is_a_hold():
    policy = build_policy({"kind": "scheduled", "schedule": "3@6:2"})
    decision = policy.decide(make_obs(step=3, allocation="6:2", rollout_s=30, train_s=20))
    assert not decision.is_resize


def test_an_allocation_outside_the_candidates_is_reported():
    policy = build_policy({"kind": "scheduled", "schedule": "3@7:1"})
    obs = make_obs(step=3, allocation="6:2", rollout_s=30, train_s=20, labels=("6:2", "4:4"))
    with pytest.raises(ValueError, match=r"scheduled.schedule: allocation 7:1 at step 3"):
        policy.decide(obs)
