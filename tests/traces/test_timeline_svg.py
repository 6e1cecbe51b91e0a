"""The run folder's timeline.svg: well-formed SVG whose lines are the run's numbers."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from trace_factory import small_trace

from dynaresize.traces.timeline_svg import timeline_svg

SVG = "{http://www.w3.org/2000/svg}"


def _parse(text: str) -> ET.Element:
    return ET.fromstring(text)


def _polyline_points(element: ET.Element) -> np.ndarray:
    return np.array([[float(v) for v in p.split(",")] for p in element.get("points").split()])


def test_the_step_time_line_is_the_recorded_step_times_in_order():
    trace = small_trace(num_steps=6)
    root = _parse(timeline_svg(trace.steps, trace.resizes, title="t <&> run"))
    assert root.find(f"{SVG}title").text == "t <&> run"  # escaped in the text, read back
    step_line = root.findall(f"{SVG}polyline")[0]
    points = _polyline_points(step_line)
    assert len(points) == len(trace.steps)
    # x grows with the step; y falls as the time grows: a linear map of the recorded values.
    assert np.all(np.diff(points[:, 0]) > 0)
    step_s = trace.steps["step_s"].to_numpy()
    slope, intercept = np.polyfit(step_s, points[:, 1], 1)
    assert slope < 0
    np.testing.assert_allclose(points[:, 1], slope * step_s + intercept, atol=0.06)


def test_every_resize_gets_one_marker_and_its_target():
    trace = small_trace(num_steps=6)
    text = timeline_svg(trace.steps, trace.resizes, title="run")
    markers = [e for e in _parse(text).iter(f"{SVG}line") if e.get("stroke") == "#9467bd"]
    # One dotted line per resize, and one in the legend.
    assert len(markers) == trace.resizes["resize_id"].nunique() + 1
    assert "→1:3" in text


def test_a_run_without_resize_records_marks_its_steps_resize_ids():
    trace = small_trace(num_steps=6)
    text = timeline_svg(trace.steps, None, title="run")
    assert "→2:2" in text  # the step that carries resize_id 0 runs on 2:2


def test_empty_steps_are_refused():
    trace = small_trace(num_steps=1)
    with pytest.raises(ValueError, match="empty"):
        timeline_svg(trace.steps.iloc[:0], None, title="run")
