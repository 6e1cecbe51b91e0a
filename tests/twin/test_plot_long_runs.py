"""The matplotlib timeline of a run with more resizes than a figure has pixel columns draws one
marker per column (the longest stall), and its resize boundaries, built a column at a time, are
those the per-resize loop built."""

from __future__ import annotations

import matplotlib
import pandas as pd
import pytest
from twin_scenarios import scenario

from dynaresize.policies import parse_policy_config
from dynaresize.twin.plots import plot_timeline
from dynaresize.twin.plots.figure import as_text
from dynaresize.twin.plots.long_runs import MARKER_COLUMNS
from dynaresize.twin.plots.runs import _resize_boundaries
from dynaresize.twin.simulation import simulate

matplotlib.use("Agg")


def _boundaries_one_by_one(resizes: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for resize_id, phases in resizes.groupby("resize_id", sort=True):
        critical = phases[phases["critical"].astype(bool)]
        span = critical if len(critical) else phases
        rows.append(
            (
                int(resize_id),
                int(phases["step"].iloc[0]) + 1,
                as_text(phases["to_allocation"].iloc[0]),
                float(span["start_s"].min()),
                float(span["end_s"].max()),
            )
        )
    columns = ["resize_id", "effective_step", "to_allocation", "start_s", "end_s"]
    return pd.DataFrame(rows, columns=columns)


@pytest.fixture(scope="module")
def long_run():
    config = scenario(simulation={"num_steps": 2 * MARKER_COLUMNS + 500})
    return simulate(config, parse_policy_config({"kind": "greedy"}))


def test_boundaries_are_those_of_the_per_resize_loop(long_run):
    resizes = long_run.resizes
    mixed = resizes.assign(critical=resizes["critical"] & (resizes["resize_id"] % 3 != 0))
    for records in (resizes, mixed):
        got = _resize_boundaries(long_run.steps, records)
        pd.testing.assert_frame_equal(got, _boundaries_one_by_one(records))


def test_a_long_run_draws_one_marker_per_column(long_run):
    boundaries = _resize_boundaries(long_run.steps, long_run.resizes)
    assert len(boundaries) > MARKER_COLUMNS
    fig = plot_timeline(long_run.steps, long_run.resizes)
    top = fig.axes[0]
    markers, stalls = (
        next(c for c in top.collections if c.get_label() == label)
        for label in ("resize", "resize stall (critical path)")
    )
    assert 0 < len(markers.get_segments()) <= MARKER_COLUMNS
    assert not any(line.get_linestyle() == ":" for line in top.get_lines())  # none one by one
    heights = [segment[1][1] for segment in stalls.get_segments()]
    longest = float((boundaries["end_s"] - boundaries["start_s"]).max())
    assert max(heights) == pytest.approx(longest)  # the longest stall is among those drawn
