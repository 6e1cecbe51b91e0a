"""`candidates_towards` lists the candidates in a direction nearest first: the current split's
neighbours in the order of `StepObservation.candidate_allocations`, whatever order the caller
gives them in and wherever splits share a number of training GPUs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dynaresize.policies import CandidatePrediction, StageTimes, StepObservation
from dynaresize.policies.moves import Direction, candidates_towards
from dynaresize.policies.types import Allocation


@st.composite
def observations(draw):
    pairs = draw(
        st.lists(
            st.tuples(st.integers(1, 6), st.integers(1, 6)), min_size=1, max_size=7, unique=True
        )
    )
    allocations = [Allocation(train_gpus=t, rollout_gpus=r) for t, r in pairs]
    current = draw(st.sampled_from(allocations))
    last = StageTimes(step=0, allocation=current, rollout_s=2, train_s=1, sync_s=0, step_s=3)
    return StepObservation(
        step=0,
        now_s=3.0,
        allocation=current,
        recent=(last,),
        candidates=tuple(
            CandidatePrediction(
                allocation=a,
                predicted_step_s=1.0 + i,
                predicted_resize_critical_s=0.0,
                predicted_resize_background_s=0.0,
            )
            for i, a in enumerate(allocations)
        ),
    )


def sorted_then_filtered(obs: StepObservation, direction: Direction) -> list[Allocation]:
    """The definition: every candidate ordered by `candidate_allocations`, then filtered."""
    current = obs.allocation.train_gpus
    ordered = obs.candidate_allocations()
    if direction is Direction.TO_ROLLOUT:
        return [a for a in ordered if a.train_gpus < current]
    return [a for a in reversed(ordered) if a.train_gpus > current]


@settings(max_examples=200, deadline=None)
@given(obs=observations(), direction=st.sampled_from(list(Direction)))
def test_candidates_towards_equals_sorting_every_candidate_first(obs, direction):
    assert candidates_towards(obs, direction) == sorted_then_filtered(obs, direction)


def test_nearest_first_in_both_directions():
    splits = [Allocation(train_gpus=t, rollout_gpus=8 - t) for t in (2, 6, 4, 3, 5)]
    current = splits[2]
    last = StageTimes(step=0, allocation=current, rollout_s=2, train_s=1, sync_s=0, step_s=3)
    obs = StepObservation(
        step=0,
        now_s=3.0,
        allocation=current,
        recent=(last,),
        candidates=tuple(
            CandidatePrediction(
                allocation=a,
                predicted_step_s=1.0,
                predicted_resize_critical_s=0.0,
                predicted_resize_background_s=0.0,
            )
            for a in splits
        ),
    )
    assert [a.train_gpus for a in candidates_towards(obs, Direction.TO_ROLLOUT)] == [3, 2]
    assert [a.train_gpus for a in candidates_towards(obs, Direction.TO_TRAIN)] == [5, 6]
