"""Online resize-cost feedback: rolling windows per transition, fallbacks, background costs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaresize.executor.observe.cost_feedback import (
    MatchLevel,
    ResizeCostFeedback,
    decision_cost_source,
)
from dynaresize.policies.registry import build_policy
from dynaresize.policies.types import (
    Allocation,
    CandidatePrediction,
    CostSource,
    Decision,
    StageTimes,
    StepObservation,
)

A31, A22, A13 = (Allocation.parse(x) for x in ("3:1", "2:2", "1:3"))


def feedback(window_size: int = 3) -> ResizeCostFeedback:
    return ResizeCostFeedback(
        fallback_critical_s=50.0,
        fallback_background_s=4.0,
        fallback_source=CostSource.CALIBRATED,
        window_size=window_size,
    )


def resize(fb: ResizeCostFeedback, rid: int, a: Allocation, b: Allocation, s: float) -> None:
    fb.observe_resize(resize_id=rid, from_allocation=a, to_allocation=b, critical_s=s)


def test_fallback_until_a_resize_is_measured():
    fb = feedback()
    est = fb.estimate(current=A31, target=A22)
    assert (est.critical_s, est.background_s, est.source) == (50.0, 4.0, CostSource.CALIBRATED)
    assert est.match is MatchLevel.FALLBACK
    stay = fb.estimate(current=A31, target=A31)
    assert (stay.critical_s, stay.background_s) == (0.0, 0.0)


def test_most_specific_measurements_win():
    fb = feedback()
    resize(fb, 0, A31, A22, 2.0)  # one GPU to rollout
    resize(fb, 1, A22, A31, 6.0)  # one GPU to training
    same = fb.estimate(current=A31, target=A22)
    assert (same.critical_s, same.match) == (2.0, MatchLevel.SAME_TRANSITION)
    # 2:2 -> 1:3 was never measured, but 3:1 -> 2:2 moves one GPU the same way.
    shift = fb.estimate(current=A22, target=A13)
    assert (shift.critical_s, shift.match) == (2.0, MatchLevel.SAME_SHIFT)
    # 3:1 -> 1:3 moves two GPUs: no transition like it; the mean of every resize.
    anyone = fb.estimate(current=A31, target=A13)
    assert anyone.critical_s == pytest.approx(4.0)
    assert anyone.match is MatchLevel.ANY_RESIZE
    assert {same.source, shift.source, anyone.source} == {CostSource.MEASURED}


def test_window_keeps_only_the_most_recent_measurements():
    fb = feedback(window_size=2)
    for rid, cost in enumerate([100.0, 3.0, 5.0]):
        resize(fb, rid, A31, A22, cost)
    est = fb.estimate(current=A31, target=A22)
    assert est.critical_s == pytest.approx(4.0)
    assert est.num_measurements == 2
    assert fb.measured_critical_s == (100.0, 3.0, 5.0)


def test_background_is_first_step_after_minus_the_next_one():
    fb = feedback()
    fb.observe_step(step_s=10.0, resize_id=None)
    resize(fb, 0, A31, A22, 2.0)
    # Before the second step after the resize, the fallback's background stands in.
    fb.observe_step(step_s=13.0, resize_id=0)
    assert fb.estimate(current=A22, target=A13).background_s == 4.0
    fb.observe_step(step_s=10.5, resize_id=None)
    assert fb.resizes[0].background_s == pytest.approx(2.5)
    assert fb.estimate(current=A22, target=A13).background_s == pytest.approx(2.5)


def test_negative_background_is_kept_but_predicts_zero():
    fb = feedback()
    resize(fb, 0, A31, A22, 2.0)
    fb.observe_step(step_s=9.0, resize_id=0)
    fb.observe_step(step_s=10.0, resize_id=None)
    assert fb.resizes[0].background_s == pytest.approx(-1.0)
    assert fb.estimate(current=A31, target=A22).background_s == 0.0


def test_back_to_back_resizes_leave_the_first_background_unmeasured():
    fb = feedback()
    resize(fb, 0, A31, A22, 2.0)
    fb.observe_step(step_s=12.0, resize_id=0)
    resize(fb, 1, A22, A13, 3.0)
    fb.observe_step(step_s=11.0, resize_id=1)
    fb.observe_step(step_s=10.0, resize_id=None)
    assert fb.resizes[0].background_s is None
    assert fb.resizes[1].background_s == pytest.approx(1.0)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="window_size"):
        feedback(window_size=0)
    with pytest.raises(ValueError, match="not a measurement"):
        ResizeCostFeedback(
            fallback_critical_s=1.0, fallback_background_s=0.0, fallback_source=CostSource.MEASURED
        )
    fb = feedback()
    with pytest.raises(ValueError, match="negative"):
        resize(fb, 0, A31, A22, -1.0)
    with pytest.raises(KeyError, match="never observed"):
        fb.observe_step(step_s=1.0, resize_id=7)


@settings(max_examples=60, deadline=None)
@given(
    costs=st.lists(st.floats(0.0, 1e4, allow_nan=False), min_size=1, max_size=12),
    window=st.integers(1, 5),
)
def test_same_transition_estimate_is_the_window_mean(costs, window):
    fb = feedback(window_size=window)
    for rid, cost in enumerate(costs):
        resize(fb, rid, A31, A22, cost)
    tail = costs[-window:]
    est = fb.estimate(current=A31, target=A22)
    assert est.critical_s == pytest.approx(sum(tail) / len(tail))
    assert min(tail) - 1e-9 <= est.critical_s <= max(tail) + 1e-9


def _observation(
    current: Allocation, fb: ResizeCostFeedback, model_costs_s: dict | None = None
) -> StepObservation:
    """An observation as the driver builds it: the estimator prices each move by the model
    (here the fallback figure unless `model_costs_s` says otherwise), the feedback replaces what
    it has measured."""
    model_costs_s = model_costs_s or {}
    base = tuple(
        CandidatePrediction(
            allocation=a,
            predicted_step_s=10.0 if a != A13 else 5.0,
            predicted_resize_critical_s=0.0
            if a == current
            else model_costs_s.get(a, fb.fallback.critical_s),
            cost_source=fb.fallback.source,
        )
        for a in (A31, A22, A13)
    )
    times = StageTimes(
        step=3, allocation=current, rollout_s=9.0, train_s=4.0, sync_s=1.0, step_s=10.0
    )
    return StepObservation(
        step=3,
        now_s=40.0,
        allocation=current,
        recent=(times,),
        candidates=fb.with_costs(base, current=current),
        measured_resize_costs_s=fb.measured_critical_s,
    )


def test_predictions_carry_each_candidates_cost_and_source():
    fb = feedback()
    resize(fb, 0, A31, A22, 2.0)
    obs = _observation(A22, fb)
    by = {c.allocation: c for c in obs.candidates}
    assert by[A22].predicted_resize_critical_s == 0.0
    assert by[A13].predicted_resize_critical_s == 2.0  # same shift as 3:1 -> 2:2
    assert by[A31].cost_source is CostSource.MEASURED
    assert by[A13].predicted_step_s == 5.0  # step-time predictions pass through untouched


def test_each_move_keeps_its_model_cost_until_a_resize_is_measured():
    """Before any measurement a candidate keeps the model's price of its own move (a move that
    starts engines costs more than one that does not); a measurement then replaces it."""
    fb = feedback()
    priced = {A31: 3.0, A13: 7.0}
    by = {c.allocation: c for c in _observation(A22, fb, priced).candidates}
    assert by[A31].predicted_resize_critical_s == 3.0
    assert by[A13].predicted_resize_critical_s == 7.0
    assert by[A13].cost_source is CostSource.CALIBRATED
    resize(fb, 0, A31, A22, 2.0)
    by = {c.allocation: c for c in _observation(A22, fb, priced).candidates}
    assert by[A13].predicted_resize_critical_s == 2.0
    assert by[A13].cost_source is CostSource.MEASURED


def test_decision_record_source_follows_the_estimate_used():
    fresh = feedback()
    obs = _observation(A22, fresh)
    assert decision_cost_source(obs, Decision.hold()) is CostSource.CALIBRATED
    assert decision_cost_source(obs, Decision.resize(A13)) is CostSource.CALIBRATED
    fb = feedback()
    resize(fb, 0, A31, A22, 2.0)
    obs = _observation(A22, fb)
    assert decision_cost_source(obs, Decision.resize(A13)) is CostSource.MEASURED
    assert decision_cost_source(obs, Decision.hold()) is CostSource.MEASURED


def test_cost_aware_policy_decides_on_measured_costs():
    """Payback moves only if the saving repays the cost: a cheap measured resize flips it."""
    policy = build_policy({"kind": "payback"})
    fb = ResizeCostFeedback(
        fallback_critical_s=1e6, fallback_background_s=0.0, fallback_source=CostSource.MODEL
    )
    before = policy.decide(_observation(A22, fb))
    assert not before.is_resize
    resize(fb, 0, A31, A22, 0.5)
    policy.reset()
    after = policy.decide(_observation(A22, fb))
    assert after.is_resize and after.target == A13


def test_step_records_give_the_gap_and_the_first_step_slowdown():
    """Fed the executor's own step records, in order, as the driver does."""
    from dynaresize.traces.schema import StepRecord

    def record(step, start, end, alloc, resize_id=None):
        return StepRecord(
            step=step,
            start_s=start,
            end_s=end,
            rollout_s=0.0,
            train_s=0.0,
            sync_s=0.0,
            step_s=end - start,
            idle_train_gpu_s=0.0,
            idle_rollout_gpu_s=0.0,
            train_gpus=alloc.train_gpus,
            rollout_gpus=alloc.rollout_gpus,
            device_roles=["train"] * alloc.train_gpus + ["rollout"] * alloc.rollout_gpus,
            resize_id=resize_id,
            rollout_batch_id=step,
            rollout_weights_version=step,
            num_samples=0,
            tokens=0,
            response_len_mean=0.0,
            response_len_p50=0.0,
            response_len_p99=0.0,
            response_len_max=0.0,
        )

    fb = feedback()
    fb.observe_step_record(record(0, 10.0, 12.0, A31))
    fb.observe_step_record(record(1, 12.1, 14.0, A31))
    fb.observe_step_record(record(2, 16.5, 19.5, A22, resize_id=0))  # 2.5 s gap, 3 s step
    fb.observe_step_record(record(3, 19.6, 21.6, A22))  # 2 s step: 1 s of background
    (done,) = fb.resizes
    assert (done.from_allocation, done.to_allocation) == (A31, A22)
    assert done.critical_s == pytest.approx(2.5)
    assert done.background_s == pytest.approx(1.0)
    est = fb.estimate(current=A22, target=A31)  # the way back: same size, other direction
    assert est.match is MatchLevel.ANY_RESIZE and est.critical_s == pytest.approx(2.5)


def test_a_resumed_run_without_the_step_before_a_resize_skips_it():
    fb = feedback()
    from types import SimpleNamespace

    first = SimpleNamespace(
        start_s=5.0, end_s=6.0, step_s=1.0, train_gpus=2, rollout_gpus=2, resize_id=3
    )
    fb.observe_step_record(first)
    assert fb.resizes == []
    assert fb.estimate(current=A22, target=A31).match is MatchLevel.FALLBACK


def test_a_prior_from_the_runs_setup_replaces_the_models_cost_until_a_measurement():
    """The twin's default model told a tiny CPU run 94.9 s; the run's own setup prior (0.06 s)
    is what the policy must see before the first resize, then the measurement."""
    fb = ResizeCostFeedback(
        fallback_critical_s=0.06,
        fallback_background_s=0.0,
        fallback_source=CostSource.MODEL,
        fallback_replaces=True,
    )
    obs = _observation(A22, fb, model_costs_s={A31: 94.9, A13: 94.9})
    by = {c.allocation: c for c in obs.candidates}
    assert by[A31].predicted_resize_critical_s == by[A13].predicted_resize_critical_s == 0.06
    assert by[A22].predicted_resize_critical_s == 0.0
    resize(fb, 0, A22, A31, 0.04)
    by = {c.allocation: c for c in _observation(A22, fb).candidates}
    assert by[A31].predicted_resize_critical_s == 0.04
    # without it (the twin's model or --costs as the fallback) each move keeps its own cost
    kept = feedback()
    by = {c.allocation: c for c in _observation(A22, kept, {A31: 94.9}).candidates}
    assert by[A31].predicted_resize_critical_s == 94.9
