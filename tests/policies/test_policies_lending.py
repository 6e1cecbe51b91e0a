"""Lending within a step: every rule's gate, against sequences worked by hand.

Where the observation carries a `LendingOffer`, verl_drc and verl_switch answer exactly as veRL's
controllers do (verl_drc: gate with the ratio as it stands, then adapt; verl_switch: adapt, then
gate), hysteresis and payback with their own admission; none of them resizes to lend. The
comments show the arithmetic of each expected figure.
"""

from __future__ import annotations

import pytest
from policy_observations import make_obs

from dynaresize.policies import LendingOffer, build_policy


def lending_obs(
    step: int,
    *,
    wait_s: float,
    waited: float,
    ready: float,
    cycles: tuple[float, ...] = (),
    activate: tuple[float, ...] = (),
    deactivate: tuple[float, ...] = (),
    remaining: int | None = None,
    predicted_wait_s: float = 0.0,
    saving_s: float = 0.0,
    switch_s: tuple[float, float] = (3.0, 1.0),
    lent: int = 4,
    stages_s: tuple[float, float] = (40.0, 30.0),
):
    """An observation at 6:2 after a step that waited `wait_s` for a `waited` share of its
    batch, with `ready` of the next batch out and the given measured switches; `stages_s` are
    its rollout and training times."""
    obs = make_obs(
        step=step,
        allocation="6:2",
        rollout_s=stages_s[0],
        train_s=stages_s[1],
        remaining_steps=remaining,
    )
    times = obs.last.model_copy(update={"wait_s": wait_s, "waited_fraction": waited})
    offer = LendingOffer(
        lent_replicas=lent,
        rollout_replicas=2,
        samples_per_step=64,
        ready_fraction=ready,
        predicted_wait_s=predicted_wait_s,
        predicted_saving_s=saving_s,
        predicted_activate_s=switch_s[0],
        predicted_deactivate_s=switch_s[1],
        measured_activate_s=activate,
        measured_deactivate_s=deactivate,
        measured_cycles_s=cycles,
    )
    return obs.model_copy(update={"recent": (times,), "lending": offer})


def until(decision) -> float | None:
    assert not decision.is_resize, "lending never resizes"
    return None if decision.lend is None else round(decision.lend.until_ready_fraction, 6)


def test_verl_drc_hand_worked_sequence_within_a_step():
    policy = build_policy({"kind": "verl_drc", "deactivate_ratio": 0.6})
    sequence = [
        # gap 0.6 - 0.5 = 0.1; wait/batch 40 / 0.4 = 100 s; saving 10 s not > 10 s prior: no.
        #   adapt +clip(0.4) = +0.1 -> 0.7
        lending_obs(0, wait_s=40, waited=0.4, ready=0.5),
        # gap 0.7 - 0.3 = 0.4; 100 s/batch; saving 40 s > 10 s: activate; adapt +0.1 -> 0.8,
        #   the lent replicas return at 0.8 of the batch
        lending_obs(1, wait_s=50, waited=0.5, ready=0.3),
        # gap 0.8 - 0.45 = 0.35; 5 / 0.05 = 100 s/batch; 35 s > mean(6) = 6 s: activate;
        #   adapt +clip(0.05) = +0.05 -> 0.85
        lending_obs(2, wait_s=5, waited=0.05, ready=0.45, cycles=(6.0,)),
        # gap 0.85 - 0.9 < 0: no; no wait: -0.02 -> 0.83
        lending_obs(3, wait_s=0, waited=0, ready=0.9, cycles=(6.0, 8.0)),
        # gap 0.83 - 0.2 = 0.63; the last estimate stays 100 s/batch; cost mean(8, 4, 30) = 14 s:
        #   63 s > 14 s, activate; -0.02 -> 0.81
        lending_obs(4, wait_s=0, waited=0, ready=0.2, cycles=(6.0, 8.0, 4.0, 30.0)),
        # gap 0.81 - 0.6 = 0.21: 21 s <= mean(30, 30, 30) = 30 s: no; -0.02 -> 0.79
        lending_obs(5, wait_s=0, waited=0, ready=0.6, cycles=(6.0, 30.0, 30.0, 30.0)),
    ]
    lends, ratios = [], []
    for obs in sequence:
        lends.append(until(policy.decide(obs)))
        ratios.append(policy.deactivate_ratio)
    assert lends == [None, 0.8, 0.85, None, 0.81, None]
    assert ratios == pytest.approx([0.7, 0.8, 0.85, 0.83, 0.81, 0.79])


def test_verl_drc_ratio_has_no_floor_and_a_ratio_below_zero_never_activates():
    """veRL lowers the ratio by 0.02 after every calm cycle with no floor; a ratio at or below
    what is ready leaves no gap, so it never activates until waits bring it back."""
    policy = build_policy({"kind": "verl_drc", "deactivate_ratio": 0.05})
    for step in range(5):
        decision = policy.decide(lending_obs(step, wait_s=0, waited=0, ready=0.1))
        assert decision.lend is None
    assert policy.deactivate_ratio == pytest.approx(0.05 - 5 * 0.02)
    assert policy.return_fraction() == 0.0


def test_verl_switch_hand_worked_sequence_within_a_step():
    """Two replicas at home, four lent: scaling 3, so benefit = remaining * wait/batch * 2/3."""
    policy = build_policy({"kind": "verl_switch"})
    sequence = [
        # totals 30 s / 0.5; idle 1/2: ratio 0.40; remaining 0.2; no measured switch: cold start
        #   lends until 0.40
        lending_obs(0, wait_s=30, waited=0.5, ready=0.2),
        # totals 40 / 0.75 = 53.33 s/batch; idle 2/2: 0.45; remaining 0.35;
        #   benefit 0.35 * 53.33 * 2/3 = 12.4 s > 6 + 2 = 8 s: lend until 0.45
        lending_obs(1, wait_s=10, waited=0.25, ready=0.1, activate=(6.0,), deactivate=(2.0,)),
        # a 1 s wait is calm (tolerance 2 s): 0.45; totals 41 / 0.77 = 53.2 s/batch;
        #   remaining 0.15: 5.3 s <= mean(6, 7) + mean(2, 3) = 9 s: no
        lending_obs(
            2, wait_s=1, waited=0.02, ready=0.3, activate=(6.0, 7.0), deactivate=(2.0, 3.0)
        ),
        # calm 2/2: 0.42; ready 0.5 beyond it: no
        lending_obs(3, wait_s=0, waited=0, ready=0.5, activate=(6.0, 7.0), deactivate=(2.0,)),
        # the last step never lends (idle 1/2: 0.42)
        lending_obs(4, wait_s=40, waited=0.8, ready=0.0, remaining=0),
    ]
    lends, ratios = [], []
    for obs in sequence:
        decision = policy.decide(obs)
        lends.append(until(decision))
        ratios.append(policy.threshold_ratio)
    assert lends == [0.4, 0.45, None, None, None]
    assert ratios == pytest.approx([0.40, 0.45, 0.45, 0.42, 0.42])
    assert "last step" in decision.reason


def test_no_replica_to_lend_is_a_hold_that_says_so():
    policy = build_policy({"kind": "verl_drc", "deactivate_ratio": 0.9})
    decision = policy.decide(lending_obs(0, wait_s=50, waited=0.5, ready=0.1, lent=0))
    assert decision.lend is None and "no replica to lend" in decision.reason


def test_hysteresis_lends_after_consecutive_signals_and_never_resizes_for_it():
    policy = build_policy({"kind": "hysteresis", "consecutive_signals": 3, "up_threshold": 0.15})
    # balanced stages (no resize signal), predicted step 35 s: waits of 10 s are 29% >= 15%
    signal = {"predicted_wait_s": 10.0, "saving_s": 4.0}
    calm = {"predicted_wait_s": 2.0, "saving_s": -1.0}
    pattern = [signal, signal, calm, signal, signal, signal, signal]
    lends = []
    for step, kw in enumerate(pattern):
        obs = lending_obs(step, wait_s=0, waited=0, ready=0.5, stages_s=(35.0, 35.0), **kw)
        lends.append(until(policy.decide(obs)))
    assert lends == [None, None, None, None, None, 1.0, 1.0]


def test_hysteresis_without_lend_never_lends():
    policy = build_policy({"kind": "hysteresis", "consecutive_signals": 1, "lend": False})
    obs = lending_obs(0, wait_s=0, waited=0, ready=0.5, predicted_wait_s=30.0, saving_s=9.0)
    assert policy.decide(obs).lend is None


@pytest.mark.parametrize(
    ("saving_s", "lends"),
    [
        (5.0, True),  # (5 + 4) = 9 s >= 1.2 * 4 = 4.8 s
        (0.7, False),  # 4.7 s < 4.8 s
        (-1.0, False),  # lending costs more than it saves
    ],
)
def test_payback_lends_when_the_saving_repays_the_switch_with_margin(saving_s, lends):
    policy = build_policy({"kind": "payback", "margin": 1.2})
    obs = lending_obs(0, wait_s=0, waited=0, ready=0.5, saving_s=saving_s, switch_s=(3.0, 1.0))
    decision = policy.decide(obs)
    assert (decision.lend is not None) == lends and not decision.is_resize


@pytest.mark.parametrize(("prior_cost_s", "activates"), [(10.0, True), (20_000.0, False)])
def test_verl_drc_seeds_a_pessimistic_wait_of_1000_s_per_sample(prior_cost_s, activates):
    """No wait measured yet: gap 0.3 - 0.1 = 0.2 of 64 samples at 1000 s each = 12,800 s,
    against the 10 s prior (activate) or a 20,000 s one (not)."""
    policy = build_policy({"kind": "verl_drc", "default_switch_cost_s": prior_cost_s})
    decision = policy.decide(lending_obs(0, wait_s=0, waited=0, ready=0.1))
    assert (decision.lend is not None) == activates
