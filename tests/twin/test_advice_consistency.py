"""Break-even advice agrees with itself: its settings come from a move the report shows, and
when no move pays back the advice is to keep the split, with no settings."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaresize.policies.types import Allocation
from dynaresize.twin.analysis.breakeven import analyse
from dynaresize.twin.analysis.trace_breakeven import report_lines, shown_transitions

SIX_TWO, FIVE_THREE, FOUR_FOUR = (Allocation.parse(t) for t in ("6:2", "5:3", "4:4"))


def _steps(rollout: np.ndarray, train: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"rollout_s": rollout, "train_s": train})


def test_no_move_from_the_current_split_pays_back_so_keep_it():
    """The trace ran on 4:4; only 6:2 -> 4:4 would pay. No setting may come from that row."""
    steady = np.tile([39.84, 23.93], (50, 1))
    report = analyse(
        steps=_steps(np.full(50, 38.0), np.full(50, 20.0)),
        steady_step_s=steady,
        candidates=(SIX_TWO, FOUR_FOUR),
        current=FOUR_FOUR,
        cost_s=187.2,
        cost_source="paper",
        total_gpus=8,
        job_steps=100,
    )
    advice = report.advice
    assert advice.keeps_split and advice.best_move is None
    assert advice.cooldown_steps is None and advice.dwell_steps is None
    assert advice.consecutive_signals is None and advice.projected_saving_hours == 0.0
    text = "\n".join(report_lines(report))
    assert "keep the split 4:4: no move from 4:4 pays back" in text
    assert "cooldown_steps" not in text and "none pays back" not in text


def test_thresholds_that_never_resize_mean_no_settings():
    """A move pays on average, but every imbalance run is one step long: no level repays it
    within the typical run, so no cooldown or signal count is advised."""
    n = 40
    rollout = np.where(np.arange(n) % 2 == 0, 30.0, 20.0)  # rollout-bound every other step
    train = np.full(n, 24.0)
    steady = np.column_stack([np.full(n, 30.0), np.full(n, 27.0), np.full(n, 29.0)])
    report = analyse(
        steps=_steps(rollout, train),
        steady_step_s=steady,
        candidates=(SIX_TWO, FIVE_THREE, FOUR_FOUR),
        current=SIX_TWO,
        cost_s=120.0,
        cost_source="test",
        total_gpus=8,
        job_steps=1000,
    )
    advice = report.advice
    assert advice.up_threshold is None and advice.down_threshold is None
    assert advice.keeps_split and advice.cooldown_steps is None
    assert advice.consecutive_signals is None


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    cost_s=st.floats(1.0, 400.0),
    current=st.integers(0, 2),
    num_steps=st.integers(5, 60),
)
def test_settings_come_from_a_shown_move_and_signals_fit_in_a_run(seed, cost_s, current, num_steps):
    rng = np.random.default_rng(seed)
    candidates = (SIX_TWO, FIVE_THREE, FOUR_FOUR)
    steady = 20.0 + 10.0 * rng.random((num_steps, 3)) + rng.normal(0, 3, (num_steps, 1))
    steps = _steps(20 + 10 * rng.random(num_steps), 20 + 10 * rng.random(num_steps))
    report = analyse(
        steps=steps,
        steady_step_s=np.abs(steady),
        candidates=candidates,
        current=candidates[current],
        cost_s=cost_s,
        cost_source="test",
        total_gpus=8,
        job_steps=500,
        num_resamples=200,
    )
    advice = report.advice
    settings_given = [advice.cooldown_steps, advice.dwell_steps, advice.consecutive_signals]
    if advice.keeps_split:
        assert settings_given == [None, None, None]
        assert advice.up_threshold is None and advice.down_threshold is None
        return
    shown = {f"{t.from_allocation} -> {t.to_allocation}": t for t in shown_transitions(report)}
    assert advice.best_move in shown
    source = shown[advice.best_move]
    assert source.from_allocation == candidates[current].label and source.steps is not None
    assert advice.dwell_steps == int(np.ceil(source.steps))
    assert advice.up_threshold is not None or advice.down_threshold is not None
    longest = int(report.runs.all_steps.max()) if len(report.runs.all_steps) else 1
    assert advice.consecutive_signals is not None and 1 <= advice.consecutive_signals <= longest
