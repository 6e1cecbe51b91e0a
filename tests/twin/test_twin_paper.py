"""The paper preset keeps the shape docs/paper-preset.md describes (its figures:
test_paper_figures.py)."""

from __future__ import annotations

import numpy as np
import pytest
from twin_scenarios import shipped_scenario

from dynaresize.twin.simulation import build_context, simulate


@pytest.fixture(scope="module")
def paper():
    config = shipped_scenario("paper")
    return config, build_context(config)


def test_rollout_bound_on_six_two_balanced_on_four_four(paper):
    _, ctx = paper
    costs = ctx.step_costs
    labels = [c.label for c in costs.candidates]
    steady = costs.step_s[1:-1].mean(axis=0)
    rollout, train = costs.rollout_s[1:-1].mean(axis=0), costs.train_s[1:-1].mean(axis=0)
    i62, i44 = labels.index("6:2"), labels.index("4:4")
    # The paper: long-tail rollout leaves 6:2's trainers idle; 4:4 aligns the two stages and is
    # the best split the run can move to.
    assert rollout[i62] > 2 * train[i62]
    assert abs(rollout[i44] - train[i44]) < 0.1 * train[i44]
    assert labels[int(np.argmin(steady))] == "4:4"
    # One resize pays back after about 11 steps (the paper: 187.2 / (39.84 - 23.93) = 11.8).
    saving = steady[i62] - steady[i44]
    assert 10 < ctx.plan.critical_s / saving < 13.5
    assert ctx.plan.critical_s == pytest.approx(187.2)


def test_the_papers_resize_beats_its_baseline_but_not_the_best_static_split(paper):
    config, ctx = paper
    scheduled = next(p for p in config.policies if p.kind == "scheduled")
    summary = simulate(config, scheduled, context=ctx).summary
    assert summary.baseline_allocation == "6:2"
    assert summary.best_static_allocation == "4:4"
    assert summary.speedup_vs_baseline > 1.2
    assert summary.speedup_vs_best_static < 1.0
    assert summary.num_resizes == 1 and summary.final_allocation == "4:4"
