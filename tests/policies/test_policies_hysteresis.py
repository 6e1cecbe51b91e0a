"""Properties of the paper's hysteresis controller and of the greedy baseline it improves on."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from policy_observations import (
    alloc,
    make_obs,
    run_closed_loop,
    scaling_model,
    times_with_imbalance,
)

from dynaresize.policies import build_policy, signals
from dynaresize.policies.hysteresis import HysteresisConfig
from dynaresize.policies.moves import MoveMode


def observed_imbalance(x: float) -> float:
    """The imbalance a policy computes from `times_with_imbalance(x)`."""
    rollout_s, train_s = times_with_imbalance(x)
    obs = make_obs(step=0, allocation="4:4", rollout_s=rollout_s, train_s=train_s)
    return signals.imbalance(obs.last)


hysteresis_configs = st.builds(
    HysteresisConfig,
    up_threshold=st.floats(0.05, 0.6),
    down_threshold=st.floats(0.05, 0.6),
    smoothing_alpha=st.floats(0.1, 1.0),
    consecutive_signals=st.integers(1, 5),
    dwell_steps=st.integers(0, 5),
    cooldown_steps=st.integers(0, 15),
    move_mode=st.sampled_from(list(MoveMode)),
)


@settings(max_examples=150, deadline=None)
@given(
    config=hysteresis_configs,
    imbalances=st.lists(st.floats(-0.95, 0.95), min_size=10, max_size=60),
)
def test_never_resizes_inside_its_cooldown(config, imbalances):
    """Whatever the signal does, two resizes are more than `cooldown_steps` boundaries apart."""

    def model(step, allocation):
        return times_with_imbalance(imbalances[step])

    record = run_closed_loop(build_policy(config), model, start="4:4", num_steps=len(imbalances))
    steps = record.resize_steps
    assert all(b - a > config.cooldown_steps for a, b in itertools.pairwise(steps))


@settings(max_examples=60, deadline=None)
@given(
    config=hysteresis_configs,
    band_positions=st.lists(st.floats(0.0, 1.0), min_size=5, max_size=60),
    start=st.sampled_from(["6:2", "5:3", "4:4", "3:5"]),
)
def test_never_oscillates_while_imbalance_stays_inside_its_band(config, band_positions, start):
    """Any stationary sequence strictly inside [-down_threshold, up_threshold] never resizes."""
    low, high = -config.down_threshold * 0.999, config.up_threshold * 0.999
    imbalances = [low + p * (high - low) for p in band_positions]

    def model(step, allocation):
        return times_with_imbalance(imbalances[step])

    policy = build_policy(config)
    record = run_closed_loop(policy, model, start=start, num_steps=len(imbalances))
    assert record.resize_steps == []


@settings(max_examples=80, deadline=None)
@given(
    config=hysteresis_configs,
    before=st.floats(0.0, 1.0),
    outside=st.floats(0.0, 1.0),
    to_rollout=st.booleans(),
    change_step=st.integers(0, 12),
)
def test_sustained_step_change_resizes_once_in_the_right_direction(
    config, before, outside, to_rollout, change_step
):
    """A step change out of the band moves once, the right way, within consecutive + 1 steps.

    The workload settles on the neighbouring candidate (imbalance 0 there), as a real step change
    whose balance point moved by one notch would.
    """
    config = config.model_copy(update={"move_mode": MoveMode.ONE_NOTCH})
    up, down, alpha = config.up_threshold, config.down_threshold, config.smoothing_alpha
    u = -down + (0.001 + 0.998 * before) * (up + down)  # strictly inside the band before
    v = up + outside * (0.99 - up) if to_rollout else -down - outside * (0.99 - down)
    # what the policy will see: the stage times carry the imbalances only up to rounding
    smoothed = alpha * observed_imbalance(v) + (1 - alpha) * observed_imbalance(u)
    crosses = smoothed >= up if to_rollout else smoothed <= -down
    assume(crosses)  # the smoothed signal leaves the band on the first changed step
    change_step = max(change_step, config.dwell_steps)
    start = alloc("4:4")

    def model(step, allocation):
        if step < change_step:
            return times_with_imbalance(u)
        return times_with_imbalance(v if allocation == start else 0.0)

    num_steps = change_step + config.consecutive_signals + 1 + 30
    record = run_closed_loop(build_policy(config), model, start="4:4", num_steps=num_steps)
    assert len(record.resize_steps) == 1
    (resize_step,) = record.resize_steps
    assert resize_step - change_step + 1 <= config.consecutive_signals + 1
    (target,) = record.targets
    assert target == (alloc("3:5") if to_rollout else alloc("5:3"))


@settings(max_examples=40, deadline=None)
@given(
    dwell_steps=st.integers(0, 10),
    imbalance=st.floats(0.5, 0.95),
)
def test_never_leaves_the_initial_allocation_before_its_dwell(dwell_steps, imbalance):
    config = HysteresisConfig(
        consecutive_signals=1, smoothing_alpha=1.0, dwell_steps=dwell_steps, cooldown_steps=0
    )
    record = run_closed_loop(
        build_policy(config),
        lambda step, a: times_with_imbalance(imbalance),
        start="4:4",
        num_steps=dwell_steps + 2,
    )
    first = record.resize_steps[0]
    assert first + 1 == max(dwell_steps, 1)


@pytest.mark.parametrize("cooldown_steps", [0, 1, 2, 5])
def test_first_resize_after_cooldown_is_exactly_one_boundary_after_it(cooldown_steps):
    """With no other filter in the way, resizes are exactly cooldown_steps + 1 apart."""
    config = HysteresisConfig(
        consecutive_signals=1, smoothing_alpha=1.0, dwell_steps=0, cooldown_steps=cooldown_steps
    )
    record = run_closed_loop(
        build_policy(config),
        lambda step, a: times_with_imbalance(0.8),
        start="7:1",
        num_steps=3 * (cooldown_steps + 1),
    )
    assert record.resize_steps == [0, cooldown_steps + 1, 2 * (cooldown_steps + 1)]


def test_predicted_best_goes_straight_to_the_fastest_candidate_that_way():
    config = HysteresisConfig(
        consecutive_signals=1,
        smoothing_alpha=1.0,
        dwell_steps=0,
        move_mode=MoveMode.PREDICTED_BEST,
    )
    predicted = {"7:1": 90, "6:2": 60, "5:3": 45, "4:4": 30, "3:5": 35, "2:6": 50}
    obs = make_obs(step=5, allocation="6:2", rollout_s=60, train_s=20, predicted_step_s=predicted)
    decision = build_policy(config).decide(obs)
    assert decision.target == alloc("4:4")


def test_holds_at_the_edge_of_the_candidates():
    config = HysteresisConfig(consecutive_signals=1, smoothing_alpha=1.0, dwell_steps=0)
    obs = make_obs(step=5, allocation="2:6", rollout_s=60, train_s=20)
    assert not build_policy(config).decide(obs).is_resize


def test_resize_restarts_the_signal_count_and_the_smoothing():
    """After its cooldown the controller needs a fresh run of consecutive signals."""
    config = HysteresisConfig(
        consecutive_signals=3, smoothing_alpha=1.0, dwell_steps=0, cooldown_steps=2
    )
    record = run_closed_loop(
        build_policy(config),
        lambda step, a: times_with_imbalance(0.8),
        start="6:2",
        num_steps=14,
    )
    # signals at steps 0,1,2 -> resize at 2; cooldown 3,4; signals 5,6,7 -> resize at 7; ...
    assert record.resize_steps == [2, 7, 12]
    assert [t.label for t in record.targets] == ["5:3", "4:4", "3:5"]


@settings(max_examples=40, deadline=None)
@given(
    balance_rollout_share=st.floats(3 / 8 + 0.01, 4 / 8 - 0.01),
    num_steps=st.integers(6, 40),
)
def test_greedy_oscillates_on_a_stationary_workload(balance_rollout_share, num_steps):
    """Balance lies between 5:3 and 4:4: greedy moves every step, back and forth."""
    rollout_work = balance_rollout_share
    train_work = 1.0 - balance_rollout_share
    record = run_closed_loop(
        build_policy({"kind": "greedy"}),
        scaling_model(rollout_work * 100, train_work * 100),
        start="5:3",
        num_steps=num_steps,
    )
    assert len(record.resize_steps) == num_steps
    labels = [t.label for t in record.targets]
    assert labels == ["4:4", "5:3"] * (num_steps // 2) + ["4:4"] * (num_steps % 2)


@settings(max_examples=40, deadline=None)
@given(
    balance_rollout_share=st.floats(3 / 8 + 0.01, 4 / 8 - 0.01),
    num_steps=st.integers(6, 40),
)
def test_hysteresis_with_a_wide_band_holds_on_that_workload(balance_rollout_share, num_steps):
    """The same workload, a band wider than the imbalance either side: no resize at all."""
    model = scaling_model(balance_rollout_share * 100, (1 - balance_rollout_share) * 100)
    record = run_closed_loop(
        build_policy({"kind": "hysteresis", "up_threshold": 0.6, "down_threshold": 0.6}),
        model,
        start="5:3",
        num_steps=num_steps,
    )
    assert record.resize_steps == []
