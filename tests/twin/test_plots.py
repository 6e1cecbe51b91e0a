"""Every plot renders to PNG, carries its labels, and draws what the data says."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from run_records_factory import RESIZES, make_run

from dynaresize.twin import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run():
    return make_run()


@pytest.fixture(scope="module")
def sweep_table():
    rows = []
    for cooldown in (5, 10, 20):
        for threshold in (0.1, 0.2):
            for seed in range(3):
                rows.append(
                    {
                        "policy.cooldown_steps": cooldown,
                        "policy.up_threshold": threshold,
                        "policy": "hysteresis" if seed else "greedy",
                        "seed": seed,
                        "speedup": 1.0 + cooldown / 100 + threshold + seed / 1000,
                        "total_time_s": 1000.0 + 10 * seed + cooldown,
                    }
                )
    return pd.DataFrame(rows)


def _saves_png(fig: Figure, tmp_path) -> None:
    path = tmp_path / "figure.png"
    fig.savefig(path, dpi=60)
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 2000


def test_timeline_panels_labels_and_resize_markers(run, tmp_path):
    steps, resizes, _ = run
    fig = plots.plot_timeline(steps, resizes, title="hysteresis on the factory run")
    _saves_png(fig, tmp_path)
    top, bottom = fig.axes
    assert fig.get_suptitle() == "hysteresis on the factory run"
    assert (top.get_xlabel(), top.get_ylabel()) == ("training step", "time (s)")
    assert (bottom.get_xlabel(), bottom.get_ylabel()) == ("run time (s)", "GPUs")
    markers = [line.get_xdata()[0] for line in top.lines if line.get_linestyle() == ":"]
    assert markers == [k - 0.5 for k in RESIZES]
    stall_heights = sorted(p.get_height() for p in top.patches)
    critical = resizes[resizes.critical].groupby("resize_id")
    expected = sorted((g.end_s.max() - g.start_s.min()) for _, g in critical)
    assert stall_heights == pytest.approx(expected)
    step_line = next(line for line in top.lines if line.get_label() == "step time")
    assert np.allclose(step_line.get_ydata(), steps["step_s"])
    labels = {t.get_text() for t in top.get_legend().get_texts()}
    assert {"step time", "rollout stage", "train stage", "resize"} <= labels


def test_timeline_without_resize_records_uses_the_steps_resize_ids(run, tmp_path):
    steps, _, _ = run
    fig = plots.plot_timeline(steps, title="no phases recorded")
    _saves_png(fig, tmp_path)
    markers = [line.get_xdata()[0] for line in fig.axes[0].lines if line.get_linestyle() == ":"]
    assert markers == [k - 0.5 for k in RESIZES]


def test_allocation_has_one_track_per_gpu(run, tmp_path):
    steps, resizes, _ = run
    fig = plots.plot_allocation(steps, resizes, title="allocation")
    _saves_png(fig, tmp_path)
    counts, devices = fig.axes
    assert counts.get_ylabel() == "GPUs" and devices.get_ylabel() == "device"
    assert devices.get_xlabel() == "run time (s)"
    assert [t.get_text() for t in devices.get_yticklabels()] == [f"GPU {d}" for d in range(8)]


def test_gantt_bars_are_the_phases(run, tmp_path):
    _, resizes, _ = run
    fig = plots.plot_resize_gantt(resizes, title="resize phases")
    _saves_png(fig, tmp_path)
    (ax,) = fig.axes
    assert ax.get_xlabel() == "time since the resize began (s)"
    assert ax.get_ylabel() == "resize phase"
    bars = ax.patches
    assert len(bars) == len(resizes)
    widths = sorted(b.get_width() for b in bars)
    assert widths == pytest.approx(sorted(resizes.end_s - resizes.start_s))
    colors = [to_hex(b.get_facecolor()) for b in bars]
    assert colors.count(plots.BACKGROUND_COLOR) == int((~resizes.critical).sum())
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {
        "critical path (pipeline waits)",
        "background (overlapped with a step)",
    }
    # every resize starts at zero on its own clock
    starts = sorted(b.get_x() for b in bars)
    assert starts[0] == 0.0 and starts[1] == 0.0


def test_heatmap_cells_are_means_over_seeds(sweep_table, tmp_path):
    fig = plots.plot_sweep_heatmap(sweep_table, title="cooldown by threshold")
    _saves_png(fig, tmp_path)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "policy.cooldown_steps (steps)"
    assert ax.get_ylabel() == "policy.up_threshold"
    cells = ax.images[0].get_array()
    expected = sweep_table.pivot_table(
        index="policy.up_threshold", columns="policy.cooldown_steps", values="speedup"
    ).to_numpy()
    assert np.allclose(cells, expected)
    assert fig.axes[1].get_ylabel() == "speedup against the best static split (×)"
    assert len(ax.texts) == expected.size


def test_heatmap_needs_two_varied_parameters(sweep_table):
    one = sweep_table[sweep_table["policy.up_threshold"] == 0.1]
    with pytest.raises(ValueError, match="two swept parameters"):
        plots.plot_sweep_heatmap(one, title="one parameter")


def test_breakeven_crosses_zero_at_cost_over_saving(tmp_path):
    transitions = pd.DataFrame(
        {
            "transition": ["6:2→4:4", "6:2→5:3"],
            "resize_critical_s": [187.2, 150.0],
            "saving_per_step_s": [39.84 - 23.93, 5.0],
            "saving_low_s": [12.0, 3.0],
            "saving_high_s": [19.0, 7.0],
        }
    )
    fig = plots.plot_breakeven_curve(transitions, title="break-even")
    _saves_png(fig, tmp_path)
    (ax,) = fig.axes
    assert ax.get_xlabel() == "steps on the new allocation after the resize"
    assert ax.get_ylabel() == "net time saved (s)"
    crossings = [line.get_xdata()[0] for line in ax.lines if line.get_marker() == "o"]
    assert crossings == pytest.approx([187.2 / 15.91, 30.0])
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "break-even 11.8 steps" in legend[0]


def test_policy_comparison_bars_are_means_with_sd_error_bars(sweep_table, tmp_path):
    fig = plots.plot_policy_comparison(sweep_table, title="policies")
    _saves_png(fig, tmp_path)
    (ax,) = fig.axes
    assert ax.get_ylabel() == "total time (s)" and ax.get_xlabel() == "policy"
    grouped = sweep_table.groupby("policy")["total_time_s"]
    heights = [b.get_height() for b in ax.patches]
    assert heights == pytest.approx(list(grouped.mean()))
    bar_container = next(c for c in ax.containers if hasattr(c, "errorbar"))
    (errorbar,) = bar_container.errorbar.lines[2]
    segments = errorbar.get_segments()
    half_lengths = [(seg[1][1] - seg[0][1]) / 2 for seg in segments]
    assert half_lengths == pytest.approx(list(grouped.std()))


def test_missing_columns_are_named(run):
    steps, _, _ = run
    with pytest.raises(ValueError, match="step_s"):
        plots.plot_timeline(steps.drop(columns=["step_s"]), title="broken")


def test_breakeven_report_rows_are_drawn_as_they_are(tmp_path):
    report_rows = pd.DataFrame(
        {
            "from_allocation": ["6:2", "6:2", "6:2"],
            "to_allocation": ["4:4", "5:3", "7:1"],
            "cost_s": [187.2, 187.2, 187.2],
            "mean_saving_per_step_s": [15.91, 2.0, -3.0],
            "steps": [187.2 / 15.91, 93.6, None],
            "ci_low_steps": [10.0, 60.0, None],
            "ci_high_steps": [13.0, None, None],
            "confidence": [0.9, 0.9, 0.9],
        }
    )
    converted = plots.transitions_from_breakeven(report_rows)
    assert list(converted["transition"]) == ["6:2→4:4", "6:2→5:3", "6:2→7:1"]
    # the short end of the break-even interval is the large saving, and the reverse
    assert converted["saving_high_s"].iloc[0] == pytest.approx(18.72)
    assert converted["saving_low_s"].iloc[0] == pytest.approx(187.2 / 13.0)
    assert converted["saving_low_s"].iloc[1] == 0.0  # unbounded: the saving may vanish
    assert np.isnan(converted["saving_low_s"].iloc[2])  # never pays: no band
    fig = plots.plot_breakeven_curve(report_rows, title="from the report")
    _saves_png(fig, tmp_path)
    crossings = [line.get_xdata()[0] for line in fig.axes[0].lines if line.get_marker() == "o"]
    assert crossings == pytest.approx([187.2 / 15.91, 93.6])


def test_scatter_points_are_means_per_sampled_point(sweep_table, tmp_path):
    fig = plots.plot_sweep_scatter(sweep_table, title="random sample")
    _saves_png(fig, tmp_path)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "policy.cooldown_steps (steps)"
    assert ax.get_ylabel() == "policy.up_threshold"
    (drawn,) = ax.collections
    means = sweep_table.groupby(["policy.cooldown_steps", "policy.up_threshold"])["speedup"].mean()
    assert np.allclose(np.sort(drawn.get_array()), np.sort(means.to_numpy()))
    assert len(drawn.get_offsets()) == len(means)
