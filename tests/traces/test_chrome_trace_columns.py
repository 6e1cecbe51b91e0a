"""The columnar Chrome-trace builder writes, event for event and byte for byte, what the
builder of one dict per event wrote (tests/traces/chrome_reference.py), on twin runs of every
pipeline mode, a log given as records, overlapping spans and the factory run."""

from __future__ import annotations

import json

import chrome_reference
import pytest
from run_records_factory import make_run
from test_chrome_trace_nesting import TWIN_MODES, _colocated_steps, _twin_run

from dynaresize.traces.chrome_trace import chrome_trace, chrome_trace_text


def _assert_same(steps, resizes=None, *, decisions=None, mode=None) -> None:
    kwargs = {"decisions": decisions, "run_name": "r → 1", "pipeline_mode": mode}
    old = chrome_reference.chrome_trace(steps, resizes, **kwargs)
    text = chrome_trace_text(steps, resizes, **kwargs)
    new = json.loads(text)
    assert len(new["traceEvents"]) == len(old["traceEvents"])
    for i, (a, b) in enumerate(zip(new["traceEvents"], old["traceEvents"], strict=True)):
        assert a == b, f"event {i}"
    assert new == old
    assert text == json.dumps(old, separators=(",", ":"), allow_nan=False)
    assert chrome_trace(steps, resizes, **kwargs) == old


@pytest.mark.parametrize("name", sorted(TWIN_MODES))
@pytest.mark.parametrize("kind", ["greedy", "hysteresis"])
def test_twin_runs_give_the_old_trace(name, kind):
    result = _twin_run(TWIN_MODES[name], kind)
    assert len(result.resizes)
    for mode in (TWIN_MODES[name]["mode"], None):
        _assert_same(result.steps, result.resizes, decisions=result.decisions, mode=mode)


def test_records_and_lists_give_the_old_trace():
    steps = _colocated_steps()
    steps[3] = steps[3].model_copy(update={"rollout_s": 1.5 * steps[3].step_s})  # overlaps
    for mode in ("colocated", "one_step_off", None):
        _assert_same(steps, mode=mode)
    frames = make_run()
    _assert_same(*frames[:2], decisions=frames[2])
    as_lists = [frame.to_dict(orient="records") for frame in frames]
    _assert_same(*as_lists[:2], decisions=as_lists[2], mode="sync")
    gap = frames[0].iloc[[0, 1, 2, 5, 6, 9]]  # steps missing: one-step-off restarts its batches
    _assert_same(gap, frames[1], mode="one_step_off")
