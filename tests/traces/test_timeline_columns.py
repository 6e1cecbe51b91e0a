"""A long run's timeline.svg is drawn per pixel column: bounded in size, yet every column shows
the same lowest and highest step time as the full line, and a run no longer than the panel is
drawn point for point."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from test_timeline_svg import SVG, _polyline_points
from twin_scenarios import scenario

from dynaresize.policies import parse_policy_config
from dynaresize.traces.timeline_columns import column_envelope, columns_held, columns_touched
from dynaresize.traces.timeline_svg import WIDTH, timeline_svg
from dynaresize.twin.simulation import simulate

PANEL_PX = WIDTH - 100


def test_the_envelope_keeps_every_columns_extremes_in_order():
    rng = np.random.default_rng(3)
    columns = np.sort(rng.integers(0, 50, 5_000))
    values = rng.normal(size=5_000)
    picked = column_envelope(columns, values)
    assert np.all(np.diff(picked) > 0)  # the line's points, in order, each once
    for column in np.unique(columns):
        mine = picked[columns[picked] == column]
        full = np.flatnonzero(columns == column)
        assert len(mine) <= 4
        assert values[mine].min() == values[full].min()
        assert values[mine].max() == values[full].max()
        assert mine[0] == full[0] and mine[-1] == full[-1]


def test_held_and_touched_columns():
    starts, held = columns_held(np.array([0.0, 1.0, 2.0, 9.0]), 10.0, width=10)
    assert held.tolist() == [0, 1, 2, 3] and starts.tolist() == [0.0, 1.0, 2.0, 9.0]
    runs = columns_touched(np.array([1, 2, 7]), np.array([3, 2, 7]), width=10)
    assert runs == [(1, 3), (7, 7)]


@pytest.fixture(scope="module")
def long_run():
    config = scenario(simulation={"num_steps": 3 * PANEL_PX})
    return simulate(config, parse_policy_config({"kind": "greedy"}))


def test_a_long_run_is_drawn_per_pixel_column(long_run):
    steps, resizes = long_run.steps, long_run.resizes
    assert resizes["resize_id"].nunique() > PANEL_PX  # more resizes than columns
    text = timeline_svg(steps, resizes, title="long")
    root = ET.fromstring(text)
    step_line = _polyline_points(root.findall(f"{SVG}polyline")[0])
    assert len(step_line) <= 4 * PANEL_PX
    # the lowest and highest step times are drawn where the full line would put them
    full = timeline_svg(steps.iloc[:PANEL_PX], resizes, title="short")
    short_line = _polyline_points(ET.fromstring(full).findall(f"{SVG}polyline")[0])
    assert len(short_line) == PANEL_PX  # a run as long as the panel: every point
    markers = [e for e in root.iter(f"{SVG}line") if e.get("stroke") == "#9467bd"]
    assert len(markers) <= PANEL_PX + 1
    polygons = root.findall(f"{SVG}polygon")
    assert all(len(p.get("points").split()) <= 4 * PANEL_PX + 4 for p in polygons)
    assert len(text) < 400_000
    # the envelope holds the full line's extremes: same top and bottom pixel
    ys = step_line[:, 1]
    top = max(float(steps["step_s"].max()), 1e-9) * 1.1
    want_low = 60 + 300 - steps["step_s"].min() / top * 300
    want_high = 60 + 300 - steps["step_s"].max() / top * 300
    assert ys.max() == pytest.approx(want_low, abs=0.06)
    assert ys.min() == pytest.approx(want_high, abs=0.06)
