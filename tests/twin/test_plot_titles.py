"""Every plot function draws without a title; the heading it then gets says what is shown."""

from __future__ import annotations

import pandas as pd
import pytest
from run_records_factory import NUM_STEPS, RESIZES, make_run

from dynaresize.twin import plots


@pytest.fixture(scope="module")
def run():
    return make_run()


@pytest.fixture(scope="module")
def sweep_table():
    rows = [
        {
            "policy.cooldown_steps": cooldown,
            "policy.up_threshold": threshold,
            "policy": "hysteresis",
            "seed": 0,
            "speedup": 1.0 + cooldown / 100 + threshold,
        }
        for cooldown in (5, 10)
        for threshold in (0.1, 0.2)
    ]
    return pd.DataFrame(rows)


def test_run_figures_are_headed_by_the_runs_size(run):
    steps, resizes, _ = run
    heading = f"Run of {NUM_STEPS} steps, {len(RESIZES)} resize(s)"
    assert plots.plot_timeline(steps, resizes).get_suptitle() == heading
    assert plots.plot_allocation(steps, resizes).get_suptitle() == heading
    gantt = plots.plot_resize_gantt(resizes)
    assert gantt.axes[0].get_title() == f"Phases of all {len(RESIZES)} resize(s)"
    first = plots.plot_resize_gantt(resizes, max_resizes=1)
    assert first.axes[0].get_title() == f"Phases of the first 1 of {len(RESIZES)} resize(s)"


def test_comparison_figures_name_what_they_show(sweep_table):
    heatmap = plots.plot_sweep_heatmap(sweep_table)
    assert heatmap.axes[0].get_title().startswith("speedup by cooldown_steps and up_threshold")
    scatter = plots.plot_sweep_scatter(sweep_table)
    assert scatter.axes[0].get_title().startswith("speedup by cooldown_steps and up_threshold")
    bars = plots.plot_policy_comparison(sweep_table, metric="speedup", metric_label="speedup")
    assert bars.axes[0].get_title() == "speedup by policy"
    moves = pd.DataFrame(
        {"transition": ["6:2→4:4"], "resize_critical_s": [187.2], "saving_per_step_s": [15.9]}
    )
    curve = plots.plot_breakeven_curve(moves)
    assert curve.axes[0].get_title() == "Net time saved after a resize, per move"


def test_a_given_title_is_kept(run, sweep_table):
    steps, resizes, _ = run
    assert plots.plot_timeline(steps, resizes, title="mine").get_suptitle() == "mine"
    heatmap = plots.plot_sweep_heatmap(sweep_table, title="mine")
    assert heatmap.axes[0].get_title().startswith("mine\n")
