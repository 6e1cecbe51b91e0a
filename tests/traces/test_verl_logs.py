"""The logs veRL writes today: validation inside the step timer, the fully-async and separate-async
trainers' keys, and inputs the verl importer must refuse rather than clip or keep silently.

Every log here is written from veRL's documented metric names (../shared/reference/facts.md and
veRL's trainers), with numbers chosen so each expectation is hand arithmetic.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from verl_log_factory import (
    TOKENS,
    batch_keys,
    colocated_line,
    one_step_off_line,
    separate_async_lines,
    write_log,
)

from dynaresize.traces.errors import TraceError
from dynaresize.traces.importers import ImportOptions, import_trace
from dynaresize.traces.phases import PhaseName, PipelineMode, StrategyName

# --- validation and checkpointing are not training ---------------------------------------------


def test_colocated_validation_and_checkpoint_are_taken_out_of_training(tmp_path):
    """veRL's colocated trainer times validation and checkpoint saving inside `timing_s/step`:
    they must not be fitted as training, and the clock keeps them between steps."""
    lines = [
        colocated_line(1, 20.0, 1.0, 15.0),
        colocated_line(2, 21.0, 1.0, 16.0, **{"timing_s/testing": 12.0}),
        colocated_line(3, 22.0, 1.0, 17.0, **{"timing_s/save_checkpoint": 30.0}),
        colocated_line(4, 20.0, 1.0, 15.0),
    ]
    write_log(tmp_path / "run.jsonl", lines)
    trace = import_trace(tmp_path / "run.jsonl")
    steps = trace.steps
    np.testing.assert_allclose(steps["train_s"], [15.0, 16.0, 17.0, 15.0])
    np.testing.assert_allclose(steps["step_s"], [36.0, 38.0, 40.0, 36.0])
    # the next step starts after the validation (and the checkpoint) that followed its step
    np.testing.assert_allclose(
        steps["start_s"], [0.0, 36.0, 36.0 + 38.0 + 12.0, 86.0 + 40.0 + 30.0]
    )
    notes = " ".join(trace.meta.notes)
    assert "validation 12.0 s in 1 steps (timing_s/testing)" in notes
    assert "checkpoint saving 30.0 s in 1 steps (timing_s/save_checkpoint)" in notes


# --- refused, not clipped or kept -------------------------------------------------------------


def test_step_timer_below_its_own_parts_names_the_key_and_line(tmp_path):
    lines = [one_step_off_line(k, 2.0, 5.0, 20.0) for k in (1, 2, 3)]
    lines[1]["data"]["timing_s/step"] = 3.0  # below gen + sync_rollout_weights = 7 s
    write_log(tmp_path / "r.jsonl", lines)
    with pytest.raises(TraceError) as err:
        import_trace(tmp_path / "r.jsonl")
    message = str(err.value)
    assert "line 2, field 'timing_s/step'" in message
    assert "timing_s/gen + timing_s/sync_rollout_weights = 7 s" in message
    lenient = import_trace(tmp_path / "r.jsonl", lenient=True)
    assert list(lenient.steps["step"]) == [0, 2] and len(lenient.skipped) == 1
    lines[1]["data"]["timing_s/step"] = 0.0
    write_log(tmp_path / "z.jsonl", lines)
    with pytest.raises(TraceError, match=r"line 2, field 'timing_s/step': must be > 0"):
        import_trace(tmp_path / "z.jsonl")


def test_infinite_timing_is_refused_and_non_finite_metrics_are_json_null(tmp_path):
    lines = [one_step_off_line(k, 2.0, 5.0, 20.0) for k in (1, 2)]
    lines[1]["data"]["actor/pg_loss"] = float("nan")
    write_log(tmp_path / "nan.jsonl", lines)
    trace = import_trace(tmp_path / "nan.jsonl")

    def strict(text: str):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))

    values = [strict(v) for v in trace.extras["value_json"]]
    assert None in values
    assert any("NaN or infinite: kept as JSON null" in n for n in trace.meta.notes)
    lines[1]["data"]["timing_s/update_actor"] = float("inf")
    write_log(tmp_path / "inf.jsonl", lines)
    with pytest.raises(TraceError, match=r"line 2, field 'timing_s/update_actor': must be finite"):
        import_trace(tmp_path / "inf.jsonl")
    write_log(tmp_path / "big.jsonl", [one_step_off_line(1, 2.0, 5.0, 20.0)])
    text = (tmp_path / "big.jsonl").read_text().replace(str(TOKENS), "1" + "0" * 400)
    (tmp_path / "big.jsonl").write_text(text)
    with pytest.raises(TraceError, match="perf/total_num_tokens"):
        import_trace(tmp_path / "big.jsonl")


def test_a_sidecar_contradicting_the_logged_throughput_is_refused(tmp_path):
    log = tmp_path / "run.jsonl"
    write_log(log, [one_step_off_line(k, 2.0, 5.0, 20.0) for k in (1, 2)])
    (tmp_path / "run.jsonl.import.json").write_text('{"train_gpus": 60, "rollout_gpus": 20}')
    with pytest.raises(TraceError) as err:
        import_trace(log)
    message = str(err.value)
    assert "run.jsonl.import.json" in message and "80 GPUs" in message
    assert "perf/throughput implies 8" in message and "line 1" in message


def test_every_missing_key_is_reported_at_once(tmp_path):
    lines = [one_step_off_line(k, 2.0, 5.0, 20.0) for k in (1, 2, 3)]
    for line in lines[1:]:
        del line["data"]["timing_s/sync_rollout_weights"]
    del lines[2]["data"]["response_length/max"]
    write_log(tmp_path / "r.jsonl", lines)
    with pytest.raises(TraceError) as err:
        import_trace(tmp_path / "r.jsonl")
    message = str(err.value)
    assert "timing_s/sync_rollout_weights (line 2 and 1 more)" in message
    assert "response_length/max (line 3)" in message


# --- the fully-async and separate-async trainers ------------------------------------------------


def test_fully_async_trainer_idle_ratios_and_weight_sync_line(tmp_path):
    """The fully-async trainer logs its step, then a line at the same step with the weight
    sync, and the rollouter's idle ratio: both reach the step."""
    lines = []
    for k, (wait, idle_rollouter) in enumerate([(4.0, 0.25), (1.0, 0.5)], start=1):
        step_s = 40.0
        lines.append(
            {
                "step": k,
                "data": {
                    "timing_s/gen": wait,
                    "timing_s/update_actor": 30.0,
                    "timing_s/step": step_s,
                    "fully_async/trainer/idle_ratio": wait / step_s,
                    "fully_async/count/current_param_version": k,
                    **batch_keys(step_s),
                },
            }
        )
        lines.append(
            {
                "step": k,
                "data": {
                    "timing_s/param_sync": 2.0,
                    "fully_async/rollouter/idle_ratio": idle_rollouter,
                },
            }
        )
    write_log(tmp_path / "async.jsonl", lines)
    trace = import_trace(
        tmp_path / "async.jsonl", options=ImportOptions(train_gpus=4, rollout_gpus=4)
    )
    steps = trace.steps
    assert trace.meta.pipeline_mode is PipelineMode.ASYNC
    np.testing.assert_allclose(steps["sync_s"], [2.0, 2.0])
    np.testing.assert_allclose(steps["train_s"], [40.0 - 4.0 - 2.0, 40.0 - 1.0 - 2.0])
    np.testing.assert_allclose(steps["idle_train_gpu_s"], [4.0 * 4, 1.0 * 4])
    np.testing.assert_allclose(steps["idle_rollout_gpu_s"], [0.25 * 40 * 4, 0.5 * 40 * 4])
    np.testing.assert_allclose(steps["rollout_s"], [0.75 * 40, 0.5 * 40])
    assert any("share a step number" in n for n in trace.meta.notes)


def test_separate_async_switches_are_resize_records_and_its_decisions_are_kept(tmp_path):
    write_log(tmp_path / "sep.jsonl", separate_async_lines())
    trace = import_trace(
        tmp_path / "sep.jsonl", options=ImportOptions(train_gpus=4, rollout_gpus=4)
    )
    assert trace.meta.pipeline_mode is PipelineMode.ASYNC
    np.testing.assert_allclose(trace.steps["train_s"], [20.0] * 6)
    resizes = trace.resizes
    assert set(resizes["strategy"]) == {StrategyName.OVERLAPPED.value}
    lends = resizes[resizes["phase"] == PhaseName.ROLLOUT_REINIT.value]
    reclaims = resizes[resizes["phase"] == PhaseName.WORKER_REINIT.value]
    np.testing.assert_allclose(lends["end_s"] - lends["start_s"], [9.0, 9.5, 8.5])
    np.testing.assert_allclose(reclaims["end_s"] - reclaims["start_s"], [3.0, 3.5, 2.5])
    assert set(lends["to_allocation"]) == {"0:8"} and set(reclaims["to_allocation"]) == {"4:4"}
    # a lend ends its step; a reclaim starts the next one
    steps = trace.steps.set_index("step")
    assert list(lends["step"]) == [0, 2, 3]
    np.testing.assert_allclose(lends["end_s"], steps.loc[[0, 2, 3], "end_s"])
    np.testing.assert_allclose(reclaims["start_s"], steps.loc[[1, 3, 4], "start_s"])
    decisions = trace.decisions
    assert list(decisions["decision"]) == ["resize", "hold", "resize", "resize", "hold", "hold"]
    assert set(decisions["policy"]) == {"verl_separate_async"}


def test_calibrate_fits_the_switch_costs_of_a_verl_run(tmp_path):
    from dynaresize.twin.analysis_context import context_from_config
    from dynaresize.twin.calibration import calibrate

    write_log(tmp_path / "sep.jsonl", separate_async_lines())
    trace = import_trace(
        tmp_path / "sep.jsonl",
        options=ImportOptions(train_gpus=4, rollout_gpus=4, model_params_b=1.5),
    )
    _, resize_fit = calibrate([trace], context_from_config(None, [trace]))
    assert resize_fit is not None
    phases = resize_fit.params.overlapped
    assert phases[PhaseName.ROLLOUT_REINIT].base_s == pytest.approx(9.0, rel=1e-6)
    assert phases[PhaseName.WORKER_REINIT].base_s == pytest.approx(3.0, rel=1e-6)
