"""Peer policies against sequences worked by hand from their documented rules.

Every expected number below was computed by hand from the rule in the policy's docstring; the
comments show the arithmetic.
"""

from __future__ import annotations

import pytest
from policy_observations import make_obs

from dynaresize.policies import build_policy
from dynaresize.policies.hpa import raw_recommendation


def decide_each(policy, steps):
    """steps: (allocation, rollout_s, train_s, measured costs, remaining); yields each decision
    as it is made, so the caller can read the policy's state after every step."""
    for step, (allocation, rollout_s, train_s, measured, remaining) in enumerate(steps):
        obs = make_obs(
            step=step,
            allocation=allocation,
            rollout_s=rollout_s,
            train_s=train_s,
            measured_resize_costs_s=measured,
            remaining_steps=remaining,
        )
        yield policy.decide(obs)


def feed(policy, steps):
    """steps: (allocation, rollout_s, train_s, measured costs, remaining) -> decisions."""
    return list(decide_each(policy, steps))


def summary(decisions):
    return [d.target.label if d.is_resize else "hold" for d in decisions]


# --- verl separate_async switch -------------------------------------------------------------


def test_verl_switch_hand_worked_sequence():
    """Home 6:2, lending one notch to 5:3: scaling 3/2, so benefit = remaining * wait/batch / 3."""
    policy = build_policy({"kind": "verl_switch"})
    steps = [
        # step 0: wait 20 s (idle 1/2), ready 0.5 >= 0.40 -> hold
        ("6:2", 40, 20, (), None),
        # step 1: wait 30 s (idle 2/2) -> ratio 0.45; ready 0.4, remaining 0.05; no cost yet -> lend
        ("6:2", 50, 20, (), None),
        # step 2: lent; wait 12 s -> ratio 0.50; ready 24/36 = 0.667 -> nothing remains -> reclaim
        ("5:3", 36, 24, (6.0,), None),
        # step 3: ratio 0.55; ready 0.4, remaining 0.15; wait per batch 92 / 2.0333 = 45.25 s;
        #   benefit 0.15 * 45.25 / 3 = 2.26 s <= cost 2 * 6 = 12 s -> hold
        ("6:2", 50, 20, (6.0, 6.0), None),
        # steps 4-6: calm; ratio 0.55 (calm 1/2), 0.52, 0.49; ready 1.0 -> hold
        ("6:2", 20, 30, (6.0, 6.0), None),
        ("6:2", 20, 30, (6.0, 6.0), None),
        ("6:2", 20, 30, (6.0, 6.0), None),
        # step 7: idle 1/2, ratio 0.49; ready 0.2, remaining 0.29; wait per batch 172 / 2.8333
        #   = 60.71 s; benefit 0.29 * 60.71 / 3 = 5.87 s > cost 2 * mean(.5,.5,.5) = 1 s -> lend
        ("6:2", 100, 20, (6.0, 6.0, 0.5, 0.5, 0.5), None),
        # step 8: lent; idle 2/2 -> ratio 0.54; ready 25/45 = 0.556 -> reclaim
        ("5:3", 45, 25, (6.0, 6.0, 0.5, 0.5, 0.5, 0.5), None),
        # step 9: the last step never lends (ratio 0.59)
        ("6:2", 100, 20, (6.0, 6.0, 0.5, 0.5, 0.5, 0.5, 0.5), 0),
    ]
    ratios = []
    decisions = []
    for decision in decide_each(policy, steps):
        decisions.append(decision)
        ratios.append(policy.threshold_ratio)
    assert summary(decisions) == [
        "hold", "5:3", "6:2", "hold", "hold", "hold", "hold", "5:3", "6:2", "hold",
    ]  # fmt: skip
    assert ratios == pytest.approx([0.40, 0.45, 0.50, 0.55, 0.55, 0.52, 0.49, 0.49, 0.54, 0.59])
    assert "last step" in decisions[-1].reason


def test_verl_switch_stays_lent_while_lending_still_pays():
    """Where verl would reclaim and lend again within the step, staying lent is the analogue."""
    policy = build_policy({"kind": "verl_switch", "adaptive_switch_threshold": False})
    decisions = feed(
        policy,
        [
            ("6:2", 100, 20, (), None),  # ready 0.2 < 0.4: cold start lends
            ("5:3", 80, 20, (), None),  # ready 0.25 < 0.4, still no measured cost: stay lent
        ],
    )
    assert summary(decisions) == ["5:3", "hold"]
    assert decisions[1].reason.startswith("keep lending")


def threshold_ratios(policy, num_steps: int, **stage_times) -> list[float]:
    """The verl_switch threshold ratio after each of `num_steps` steps with the same times."""
    ratios = []
    for step in range(num_steps):
        policy.decide(make_obs(step=step, **stage_times))
        ratios.append(policy.threshold_ratio)
    return ratios


def test_verl_switch_ratio_floor_and_ceiling():
    calm = build_policy({"kind": "verl_switch"})
    ratios = threshold_ratios(calm, 7, allocation="6:2", rollout_s=10, train_s=30)
    # release after 2 calm steps, then every calm step; floor 1 / parameter_sync_step = 0.25
    assert ratios == pytest.approx([0.40, 0.37, 0.34, 0.31, 0.28, 0.25, 0.25])

    idle = build_policy({"kind": "verl_switch", "switch_threshold_ratio": 0.9})
    ratios = threshold_ratios(
        idle, 5, allocation="6:2", rollout_s=30, train_s=29.5, measured_resize_costs_s=(1e6,)
    )
    # a 0.5 s wait is below the 2 s idle tolerance: calm, not idle
    assert ratios == pytest.approx([0.90, 0.87, 0.84, 0.81, 0.78])

    idle = build_policy({"kind": "verl_switch", "switch_threshold_ratio": 0.9})
    ratios = threshold_ratios(
        idle, 4, allocation="6:2", rollout_s=30, train_s=20, measured_resize_costs_s=(1e6,)
    )
    assert ratios == pytest.approx([0.90, 0.95, 1.0, 1.0])


# --- verl DynamicResourceController ---------------------------------------------------------


def test_verl_drc_hand_worked_sequence():
    policy = build_policy({"kind": "verl_drc"})
    ratios = []
    decisions = []
    steps = [
        # step 0: wait 10 s, ready 0.75, waited 0.25 -> +clip(0.25) = +0.1 -> ratio 0.40;
        #   gap 0.40 - 0.75 < 0 -> hold
        ("6:2", 40, 30, (), None),
        # step 1: wait 30 s, ready 0.4 -> wait/batch 30 / 0.6 = 50 s; ratio 0.50; gap 0.10;
        #   saving 0.1 * 50 = 5 s <= 10 s (no history) -> hold
        ("6:2", 50, 20, (), None),
        # step 2: wait 80 s, ready 0.2 -> 100 s/batch; ratio 0.60; gap 0.40; 40 s > 10 s -> activate
        ("6:2", 100, 20, (), None),
        # step 3: lent; wait 4 s, ready 0.9 -> ratio 0.70; gap < 0 -> deactivate
        ("5:3", 40, 36, (3.0,), None),
        # step 4: no wait -> ratio 0.68; gap < 0 -> hold
        ("6:2", 20, 30, (3.0, 5.0), None),
        # step 5: wait 30 s, ready 0.5 -> 60 s/batch; ratio 0.78; gap 0.28; saving 16.8 s >
        #   cost 2 * mean(3, 5) = 8 s -> activate
        ("6:2", 60, 30, (3.0, 5.0), None),
    ]
    for decision in decide_each(policy, steps):
        decisions.append(decision)
        ratios.append(policy.deactivate_ratio)
    assert summary(decisions) == ["hold", "hold", "5:3", "6:2", "hold", "5:3"]
    assert ratios == pytest.approx([0.40, 0.50, 0.60, 0.70, 0.68, 0.78])


@pytest.mark.parametrize(
    ("rollout_s", "measured", "activates"),
    [
        # fixed ratio 0.5, train 20 s: ready 20 / rollout, gap 0.5 - ready, wait/batch = rollout
        (50.0, (), False),  # gap 0.1 * 50 = 5 s <= 10 s default
        (125.0, (), True),  # gap 0.34 * 125 = 42.5 s > 10 s
        (125.0, (90.0, 10.0, 10.0, 30.0), True),  # cost 2 * mean(10, 10, 30) = 33.3 s < 42.5 s
        (125.0, (30.0, 30.0, 30.0, 10.0), False),  # cost 2 * mean(30, 30, 10) = 46.7 s > 42.5 s
    ],
)
def test_verl_drc_switch_cost_is_the_mean_of_the_last_three_measured(
    rollout_s, measured, activates
):
    policy = build_policy({"kind": "verl_drc", "deactivate_ratio": 0.5, "adaptive_ratio": False})
    obs = make_obs(
        step=0,
        allocation="6:2",
        rollout_s=rollout_s,
        train_s=20.0,
        measured_resize_costs_s=measured,
    )
    assert policy.decide(obs).is_resize == activates


def test_verl_drc_ratio_increase_is_clipped():
    policy = build_policy({"kind": "verl_drc"})
    policy.decide(make_obs(step=0, allocation="6:2", rollout_s=20.2, train_s=20.0))
    assert policy.deactivate_ratio == pytest.approx(0.32)  # waited 0.0099 -> clipped up to 0.02
    policy.decide(make_obs(step=1, allocation="6:2", rollout_s=100.0, train_s=20.0))
    assert policy.deactivate_ratio == pytest.approx(0.42)  # waited 0.8 -> clipped down to 0.1


# --- HPA -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "metric", "expected"),
    [
        (2, 1.09, 2),  # within tolerance 0.1
        (2, 0.91, 2),
        (2, 1.2, 3),  # ceil(2.4)
        (2, 2.0, 4),
        (4, 0.5, 2),
        (4, 0.3, 2),  # ceil(1.2)
    ],
)
def test_hpa_replica_formula(current, metric, expected):
    assert raw_recommendation(current, metric=metric, target=1.0, tolerance=0.1) == expected


def test_hpa_hand_worked_sequence_with_scale_down_window():
    policy = build_policy({"kind": "hpa"})
    steps = [("6:2", 40, 20, (), None)]  # metric 2 -> ceil(2 * 2) = 4 -> 4:4 (limit max(4, 6))
    steps += [("4:4", 22, 21, (), None)]  # metric 1.048: within tolerance -> hold
    steps += [("4:4", 15, 30, (), None)] * 8  # metric 0.5 -> 2, held by the 8-step window
    decisions = feed(policy, steps)
    # step 1 recommended 4; it leaves the window (steps > t - 8) only at step 9
    assert summary(decisions) == ["4:4"] + ["hold"] * 8 + ["6:2"]


def test_hpa_per_period_limit_in_gpus():
    policy = build_policy(
        {
            "kind": "hpa",
            "scale_up_policies": [{"type": "gpus", "value": 1, "period_steps": 2}],
        }
    )
    decisions = feed(
        policy,
        [
            ("6:2", 60, 20, (), None),  # wants ceil(2 * 3) = 6; period start 2 -> limit 3 -> 5:3
            (
                "5:3",
                60,
                20,
                (),
                None,
            ),  # +1 earlier this period: start 2, limit 3 -> hold
            ("5:3", 60, 20, (), None),  # the step-0 event left the period: limit 4 -> 4:4
        ],
    )
    assert summary(decisions) == ["5:3", "hold", "4:4"]


@pytest.mark.parametrize(
    ("select", "expected"),
    [("Max", "4:4"), ("Min", "5:3"), ("Disabled", "hold")],
)
def test_hpa_select_policy(select, expected):
    """At 6:2 wanting 6 rollout GPUs: percent 100 allows 4, gpus 1 allows 3."""
    policy = build_policy(
        {
            "kind": "hpa",
            "scale_up_policies": [
                {"type": "percent", "value": 100},
                {"type": "gpus", "value": 1},
            ],
            "scale_up_select_policy": select,
        }
    )
    assert summary(feed(policy, [("6:2", 60, 20, (), None)])) == [expected]


def test_hpa_holds_when_no_candidate_fits_inside_the_limit():
    policy = build_policy({"kind": "hpa", "scale_up_policies": [{"type": "gpus", "value": 1}]})
    obs = make_obs(step=0, allocation="6:2", rollout_s=60, train_s=20, labels=("6:2", "4:4"))
    assert not policy.decide(obs).is_resize
