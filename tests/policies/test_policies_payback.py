"""`payback` admits a resize only when its predicted saving over the horizon repays its cost."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from policy_observations import EIGHT_GPU_SPLITS, alloc

from dynaresize.policies import (
    CandidatePrediction,
    StageTimes,
    StepObservation,
    build_policy,
)
from dynaresize.policies.payback import PaybackConfig

seconds = st.floats(0.0, 500.0, allow_nan=False)


@st.composite
def observations(draw):
    current = draw(st.sampled_from(EIGHT_GPU_SPLITS))
    candidates = tuple(
        CandidatePrediction(
            allocation=alloc(label),
            predicted_step_s=draw(st.floats(1.0, 100.0)),
            predicted_resize_critical_s=0.0 if label == current else draw(seconds),
            predicted_resize_background_s=0.0 if label == current else draw(seconds),
        )
        for label in EIGHT_GPU_SPLITS
    )
    last = StageTimes(
        step=7, allocation=alloc(current), rollout_s=30, train_s=20, sync_s=1, step_s=31
    )
    return StepObservation(
        step=7,
        now_s=300.0,
        allocation=alloc(current),
        recent=(last,),
        candidates=candidates,
        remaining_steps=draw(st.none() | st.integers(0, 200)),
    )


configs = st.builds(
    PaybackConfig,
    horizon_steps=st.integers(1, 200),
    margin=st.floats(1.0, 3.0),
    cap_horizon_at_remaining_steps=st.booleans(),
)


def _horizon(config, obs):
    if config.cap_horizon_at_remaining_steps and obs.remaining_steps is not None:
        return min(config.horizon_steps, obs.remaining_steps)
    return config.horizon_steps


def _repays(config, obs, prediction):
    stay = obs.candidate(obs.allocation)
    saving = (stay.predicted_step_s - prediction.predicted_step_s) * _horizon(config, obs)
    cost = prediction.predicted_resize_critical_s + prediction.predicted_resize_background_s
    return saving > 0 and saving >= cost * config.margin, saving - cost


@settings(max_examples=150, deadline=None)
@given(config=configs, obs=observations())
def test_never_admits_a_resize_whose_saving_is_below_its_cost(config, obs):
    decision = build_policy(config).decide(obs)
    if decision.is_resize:
        target = obs.candidate(decision.target)
        stay = obs.candidate(obs.allocation)
        saving = (stay.predicted_step_s - target.predicted_step_s) * _horizon(config, obs)
        assert saving >= target.predicted_resize_total_s
        assert saving >= target.predicted_resize_total_s * config.margin


@settings(max_examples=150, deadline=None)
@given(config=configs, obs=observations())
def test_moves_exactly_when_some_candidate_repays_and_to_the_largest_net_gain(config, obs):
    decision = build_policy(config).decide(obs)
    admissible = {
        c.allocation: net
        for c in obs.candidates
        if c.allocation != obs.allocation
        for ok, net in [_repays(config, obs, c)]
        if ok
    }
    assert decision.is_resize == bool(admissible)
    if decision.is_resize:
        assert admissible[decision.target] == max(admissible.values())


def test_hand_worked_paper_numbers():
    """Paper: 39.84 s on 6:2, 23.93 s on 4:4, 187.2 s per resize: 11.8 steps to break even."""

    def obs(remaining):
        return StepObservation(
            step=10,
            now_s=400.0,
            allocation=alloc("6:2"),
            recent=(
                StageTimes(
                    step=10,
                    allocation=alloc("6:2"),
                    rollout_s=39.0,
                    train_s=20.0,
                    sync_s=0.84,
                    step_s=39.84,
                ),
            ),
            candidates=(
                CandidatePrediction(
                    allocation=alloc("6:2"), predicted_step_s=39.84, predicted_resize_critical_s=0
                ),
                CandidatePrediction(
                    allocation=alloc("4:4"),
                    predicted_step_s=23.93,
                    predicted_resize_critical_s=187.2,
                ),
            ),
            remaining_steps=remaining,
        )

    policy = build_policy({"kind": "payback", "horizon_steps": 100, "margin": 1.0})
    assert not policy.decide(obs(11)).is_resize  # 11 * 15.91 = 175.0 s < 187.2 s
    assert policy.decide(obs(12)).target == alloc("4:4")  # 12 * 15.91 = 190.9 s >= 187.2 s
    strict = build_policy({"kind": "payback", "horizon_steps": 100, "margin": 1.2})
    assert not strict.decide(obs(14)).is_resize  # 222.7 s < 224.6 s
    assert strict.decide(obs(15)).is_resize  # 238.7 s >= 224.6 s
    assert not policy.decide(obs(0)).is_resize
