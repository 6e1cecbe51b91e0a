"""The offline-optimal dynamic program against brute force and hand-worked cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dynaresize.twin.optimal import (
    Regret,
    best_static,
    offline_optimum,
    schedule_total_s,
    uniform_resize_matrix,
)


def brute_force(step_s, resize_s, initial_index, move_before_first_step=False):
    num_steps, num_candidates = step_s.shape
    best = None
    for path in itertools.product(range(num_candidates), repeat=num_steps):
        if initial_index is not None and not move_before_first_step and path[0] != initial_index:
            continue
        start = path[0] if initial_index is None else initial_index
        total = schedule_total_s(step_s, resize_s, initial_index=start, path=np.array(path))
        best = total if best is None else min(best, total)
    return best


times = st.floats(0, 100, allow_nan=False, allow_infinity=False)


@st.composite
def problems(draw):
    num_candidates = draw(st.integers(1, 3))
    num_steps = draw(st.integers(1, 6))
    step_s = draw(arrays(np.float64, (num_steps, num_candidates), elements=times))
    resize_s = draw(arrays(np.float64, (num_candidates, num_candidates), elements=times))
    initial = draw(st.one_of(st.none(), st.integers(0, num_candidates - 1)))
    return step_s, resize_s, initial


@settings(max_examples=200, deadline=None)
@given(problem=problems(), early=st.booleans())
def test_dynamic_program_equals_brute_force(problem, early):
    step_s, resize_s, initial = problem
    optimum = offline_optimum(step_s, resize_s, initial_index=initial, move_before_first_step=early)
    expected = brute_force(step_s, resize_s, initial, move_before_first_step=early)
    assert optimum.total_s == pytest.approx(expected, abs=1e-9)
    if not early and initial is not None:
        assert optimum.candidate_index[0] == initial
    # the returned path really costs what it claims
    start = optimum.candidate_index[0] if initial is None else initial
    again = schedule_total_s(step_s, resize_s, initial_index=start, path=optimum.candidate_index)
    assert again == pytest.approx(optimum.total_s, abs=1e-9)
    # never worse than staying on the initial candidate, nor (free start) any static split
    if initial is None:
        assert optimum.total_s <= best_static(step_s)[1] + 1e-9
    else:
        assert optimum.total_s <= step_s[:, initial].sum() + 1e-9


def test_paper_like_case_moves_once_when_it_pays():
    # 6:2 takes 39.84 s a step, 4:4 takes 23.93 s; a move costs 187.2 s.
    steps = 100
    step_s = np.tile([39.84, 23.93], (steps, 1))
    resize_s = np.array([[0.0, 187.2], [187.2, 0.0]])
    optimum = offline_optimum(step_s, resize_s, initial_index=0)
    assert optimum.num_resizes == 1
    assert optimum.candidate_index[:2].tolist() == [0, 1]  # moves at the first boundary
    assert optimum.total_s == pytest.approx(39.84 + 187.2 + 99 * 23.93)
    early = offline_optimum(step_s, resize_s, initial_index=0, move_before_first_step=True)
    assert early.total_s == pytest.approx(187.2 + 100 * 23.93)


def test_short_run_does_not_move():
    # 11 steps after the first save 11 * 15.91 = 175 s < 187.2 s: staying is optimal
    # (break-even ~11.8 steps); 12 save 190.9 s > 187.2 s.
    step_s = np.tile([39.84, 23.93], (12, 1))
    resize_s = np.array([[0.0, 187.2], [187.2, 0.0]])
    optimum = offline_optimum(step_s, resize_s, initial_index=0)
    assert optimum.num_resizes == 0
    assert optimum.total_s == pytest.approx(12 * 39.84)
    thirteen = offline_optimum(np.tile([39.84, 23.93], (13, 1)), resize_s, initial_index=0)
    assert thirteen.num_resizes == 1


def test_regime_switch_moves_there_and_back():
    first = np.tile([10.0, 20.0], (50, 1))
    second = np.tile([20.0, 10.0], (50, 1))
    step_s = np.vstack([first, second, first])
    resize_s = np.full((2, 2), 5.0)
    optimum = offline_optimum(step_s, resize_s, initial_index=0)
    assert optimum.num_resizes == 2
    assert optimum.candidate_index.tolist() == [0] * 50 + [1] * 50 + [0] * 50
    assert optimum.total_s == pytest.approx(150 * 10 + 2 * 5)


def test_best_static_and_regret():
    step_s = np.array([[1.0, 3.0], [1.0, 3.0], [5.0, 1.0]])
    assert best_static(step_s) == (0, 7.0)
    optimum = offline_optimum(step_s, np.zeros((2, 2)), initial_index=0)
    regret = Regret(policy_total_s=9.0, optimal_total_s=optimum.total_s)
    assert regret.optimal_total_s == pytest.approx(3.0)
    assert regret.regret_s == pytest.approx(6.0)
    assert regret.regret_fraction == pytest.approx(2.0)
    assert uniform_resize_matrix(3, 7.0).tolist() == [[0, 7, 7], [7, 0, 7], [7, 7, 0]]


def test_bad_inputs_raise_value_error():
    with pytest.raises(ValueError, match="shape"):
        offline_optimum(np.ones(3), np.zeros((1, 1)), initial_index=0)
    with pytest.raises(ValueError, match="resize costs"):
        offline_optimum(np.ones((3, 2)), np.zeros((3, 3)), initial_index=0)
    with pytest.raises(ValueError, match="finite"):
        offline_optimum(np.full((2, 2), np.nan), np.zeros((2, 2)), initial_index=0)
    with pytest.raises(ValueError, match="initial_index"):
        offline_optimum(np.ones((2, 2)), np.zeros((2, 2)), initial_index=2)
    empty = offline_optimum(np.zeros((0, 2)), np.zeros((2, 2)), initial_index=1)
    assert empty.total_s == 0.0 and empty.num_resizes == 0


def _scenario(num_steps: int, workload: str = "regime_switch"):
    from twin_scenarios import preset_scenario

    return preset_scenario(workload, samples_per_step=64, num_steps=num_steps)


def test_no_simulated_policy_beats_the_bound_and_following_it_reaches_it():
    from dynaresize.twin.optimal import Regret, optimum_of_context
    from dynaresize.twin.simulation import build_context, simulate

    config = _scenario(60)
    context = build_context(config)
    optimum = optimum_of_context(context, from_initial=True)
    free = optimum_of_context(context)
    assert free.total_s <= optimum.total_s
    assert free.total_s <= context.baselines.best_total_s + 1e-6
    for policy in ({"kind": "static"}, {"kind": "greedy"}, {"kind": "hysteresis"}):
        result = simulate(config, policy, context=context)
        regret = Regret(policy_total_s=result.summary.total_s, optimal_total_s=free.total_s)
        assert regret.regret_s >= -1e-6, policy
        assert result.summary.total_s >= optimum.total_s - 1e-6, policy
    # a schedule that makes the optimum's moves pays its critical paths plus background work
    path = optimum.candidate_index
    labels = [c.label for c in context.step_costs.candidates]
    moves = [
        {"step": int(k - 1), "allocation": labels[path[k]]}
        for k in range(1, len(path))
        if path[k] != path[k - 1]
    ]
    result = simulate(config, {"kind": "scheduled", "schedule": moves}, context=context)
    background_s = context.plan.slowdown_s + context.plan.background_tail_s
    assert result.summary.num_resizes == optimum.num_resizes
    assert optimum.total_s - 1e-6 <= result.summary.total_s
    assert result.summary.total_s <= optimum.total_s + optimum.num_resizes * background_s + 1e-6


def test_regret_is_one_definition_with_rounding_and_a_zero_optimum_guarded():
    """The same schedule summed in another order differs at rounding level: no regret; a real gap
    is the difference; an optimum of 0 gives no fraction instead of a division by zero."""
    from dynaresize.twin.optimal import Regret

    assert Regret(policy_total_s=1000.0 * (1 + 1e-12), optimal_total_s=1000.0).regret_s == 0.0
    assert Regret(policy_total_s=1100.0, optimal_total_s=1000.0).regret_s == pytest.approx(100.0)
    assert Regret(policy_total_s=1100.0, optimal_total_s=1000.0).regret_fraction == pytest.approx(
        0.1
    )
    assert Regret(policy_total_s=5.0, optimal_total_s=0.0).regret_fraction == 0.0


@pytest.mark.parametrize("initial_index", [None, 1])
def test_the_compiled_forward_pass_finds_the_python_loops_schedule_to_the_bit(
    initial_index, monkeypatch
):
    """Ties included (lengths drawn from a few values, moves of equal cost): the same path,
    the same totals, whichever backend runs the forward pass."""
    import dynaresize.twin.optimal as optimal

    rng = np.random.default_rng(3)
    step_s = rng.choice([1.0, 1.5, 2.0, 0.1 + 0.2], size=(500, 4))
    resize_s = uniform_resize_matrix(4, 0.5)
    resize_s[2, 0] = 0.25
    found = {}
    for compiled in (False, True):
        monkeypatch.setattr(optimal, "_compiled", lambda _steps, c=compiled: c)
        found[compiled] = offline_optimum(step_s, resize_s, initial_index=initial_index)
    python, numba = found[False], found[True]
    assert np.array_equal(python.candidate_index, numba.candidate_index)
    assert python.total_s == numba.total_s
    assert python.resize_s == numba.resize_s and python.num_resizes == numba.num_resizes
    assert python.num_resizes > 0
