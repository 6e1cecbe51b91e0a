"""Every track of a Chrome trace nests (a span ends before the next begins, or inside it), in
every pipeline mode, with or without the mode given; stages sit where the pipeline ran them."""

from __future__ import annotations

from collections import defaultdict

import pytest
from trace_factory import step_record
from twin_scenarios import scenario

from dynaresize.policies import parse_policy_config
from dynaresize.traces.chrome_trace import (
    LANE_TID_STRIDE,
    NESTING_TOLERANCE_US,
    PIPELINE_PID,
    STAGE_TRACKS,
    chrome_trace,
    iter_spans,
)
from dynaresize.traces.phases import PipelineMode
from dynaresize.twin.simulation import simulate

TWIN_MODES = {
    "sync": {"mode": "sync"},
    "one_step_off": {"mode": "one_step_off"},
    "async_drain": {"mode": "async", "max_staleness_steps": 2, "in_flight": "drain"},
    "async_abort": {"mode": "async", "max_staleness_steps": 1, "in_flight": "abort"},
}


def _tracks(trace) -> dict[tuple[int, int], list[dict]]:
    tracks = defaultdict(list)
    for span in iter_spans(trace):
        tracks[(span["pid"], span["tid"])].append(span)
    return tracks


def _assert_every_track_nests(trace) -> None:
    for track, spans in _tracks(trace).items():
        open_ends: list[float] = []
        for span in sorted(spans, key=lambda s: (s["ts"], -s["dur"])):
            start, end = span["ts"], span["ts"] + span["dur"]
            while open_ends and open_ends[-1] <= start + NESTING_TOLERANCE_US:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1] + NESTING_TOLERANCE_US, (
                f"track {track}: {span['name']} [{start}, {end}] overlaps a span ending at "
                f"{open_ends[-1]}"
            )
            open_ends.append(end)


def _twin_run(pipeline: dict, kind: str):
    config = scenario(pipeline=pipeline)
    return simulate(config, parse_policy_config({"kind": kind}))


@pytest.fixture(scope="module", params=sorted(TWIN_MODES))
def twin_runs(request):
    pipeline = TWIN_MODES[request.param]
    return pipeline["mode"], [_twin_run(pipeline, kind) for kind in ("greedy", "hysteresis")]


def _colocated_steps() -> list:
    """A colocated run as a log gives it: generation, training and sync one after the other."""
    steps, start = [], 0.0
    for k in range(12):
        rollout_s, train_s, sync_s = 30.0 + 7.0 * (k % 4), 20.0, 1.5
        step_s = rollout_s + train_s + sync_s + 0.5
        steps.append(
            step_record(
                k,
                start_s=start,
                rollout_s=rollout_s,
                train_s=train_s,
                sync_s=sync_s,
                step_s=step_s,
                end_s=start + step_s,
                idle_train_gpu_s=0.0,
                idle_rollout_gpu_s=0.0,
            )
        )
        start += step_s
    return steps


def test_every_track_nests_in_every_twin_mode(twin_runs):
    mode, results = twin_runs
    assert any(len(r.resizes) for r in results)
    for result in results:
        for given in (mode, None):
            trace = chrome_trace(
                result.steps, result.resizes, decisions=result.decisions, pipeline_mode=given
            )
            _assert_every_track_nests(trace)


def test_every_track_nests_in_a_colocated_log():
    steps = _colocated_steps()
    for given in (PipelineMode.COLOCATED, None):
        _assert_every_track_nests(chrome_trace(steps, pipeline_mode=given))


def _stage_spans(trace, stage: str) -> list[dict]:
    return [
        s
        for s in iter_spans(trace)
        if s["pid"] == PIPELINE_PID and s["tid"] % LANE_TID_STRIDE == STAGE_TRACKS[stage]
    ]


def test_one_step_off_rollouts_are_the_next_batch_beside_training():
    result = _twin_run(TWIN_MODES["one_step_off"], "hysteresis")
    trace = chrome_trace(result.steps, result.resizes, pipeline_mode="one_step_off")
    rollouts = sorted(_stage_spans(trace, "rollout"), key=lambda s: s["ts"])
    steps = result.steps.sort_values("step")
    # one rollout per batch, one track: batch 0 first, then batch k+1 beside training on k
    assert [s["args"]["rollout_batch_id"] for s in rollouts] == list(steps["rollout_batch_id"])
    assert {s["tid"] for s in rollouts} == {STAGE_TRACKS["rollout"]}
    trains = {s["args"]["step"]: s for s in _stage_spans(trace, "train")}
    for span in rollouts[1:]:
        k = span["args"]["step"]
        assert span["args"]["rollout_batch_id"] == k + 1
        assert span["ts"] == pytest.approx(trains[k]["ts"])
        recorded = steps.loc[steps["step"] == k + 1, "rollout_s"].item()
        assert span["dur"] == pytest.approx(recorded * 1e6, abs=0.01)
    assert trains[0]["ts"] == pytest.approx(rollouts[0]["ts"] + rollouts[0]["dur"])


def test_overlapping_spans_move_to_a_numbered_track_of_the_same_name():
    # Without the mode, rollouts are anchored at each step's start: one that lasts longer than
    # its step (as a one-step-off rollout recorded with the step it fed can) still runs when the
    # next step's is drawn.
    steps = _colocated_steps()
    steps[3] = steps[3].model_copy(update={"rollout_s": 1.5 * steps[3].step_s})
    trace = chrome_trace(steps)
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    moved = [s for s in _stage_spans(trace, "rollout") if s["tid"] != STAGE_TRACKS["rollout"]]
    assert [s["name"] for s in moved] == ["rollout 4"]
    assert names[(PIPELINE_PID, moved[0]["tid"])] == "rollout (2)"
    _assert_every_track_nests(trace)
