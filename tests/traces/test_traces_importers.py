"""Importers: verl file-logger JSONL (colocated and one-step-off) and CSV metric tables, on files
written here from the documented metric names, against hand arithmetic."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer

from dynaresize.commands.guard import user_errors
from dynaresize.traces.errors import TraceError
from dynaresize.traces.importers import (
    CsvMapping,
    ImportOptions,
    TraceFormat,
    detect_format,
    import_trace,
)
from dynaresize.traces.io import TABLES, read_trace, write_trace
from dynaresize.traces.schema import PipelineMode

GEN_ASYNC = [30.0, 32.0, 20.0, 35.0]
WAIT = [30.0, 12.0, 0.5, 14.0]
SYNC = [5.5, 5.75, 5.25, 6.0]
TRAIN = [21.0, 22.5, 20.0, 23.25]
RESP_MEAN, RESP_MAX, PROMPT_MEAN, NUM_SAMPLES, NUM_GPUS = 900.0, 7000.0, 300.0, 256, 8
TOKENS = round(NUM_SAMPLES * (PROMPT_MEAN + RESP_MEAN))


def verl_data(k: int, *, one_step_off: bool) -> dict:
    if one_step_off:
        timing = {
            "gen": WAIT[k],
            "generate_async": GEN_ASYNC[k],
            "sync_rollout_weights": SYNC[k],
            "update_actor": TRAIN[k] - 2.0,
            "old_log_prob": 2.0,
            "step": WAIT[k] + SYNC[k] + TRAIN[k],
        }
    else:
        timing = {
            "gen": GEN_ASYNC[k],
            "update_weights": SYNC[k],
            "update_actor": TRAIN[k],
            "step": GEN_ASYNC[k] + SYNC[k] + TRAIN[k],
        }
    data = {f"timing_s/{key}": value for key, value in timing.items()}
    data.update(
        {
            "response_length/mean": RESP_MEAN,
            "response_length/max": RESP_MAX,
            "prompt_length/mean": PROMPT_MEAN,
            "perf/total_num_tokens": TOKENS,
            "perf/time_per_step": timing["step"],
            "perf/throughput": TOKENS / (timing["step"] * NUM_GPUS),
            "actor/entropy": 0.125 * (k + 1),
        }
    )
    return data


def write_verl(path, *, one_step_off: bool, lines: list | None = None) -> None:
    if lines is None:
        lines = [{"step": 0, "data": {"val-core/acc": 0.25}}]
        lines += [
            {"step": k + 1, "data": verl_data(k, one_step_off=one_step_off)}
            for k in range(len(WAIT))
        ]
    with open(path, "w") as f:
        for obj in lines:
            f.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")


def test_verl_one_step_off_matches_hand_arithmetic(tmp_path):
    path = tmp_path / "run.jsonl"
    write_verl(path, one_step_off=True)
    trace = import_trace(path, options=ImportOptions(train_gpus=6, rollout_gpus=2))
    steps = trace.steps
    assert trace.meta.pipeline_mode is PipelineMode.ONE_STEP_OFF
    assert (trace.meta.importer, trace.meta.num_gpus) == ("verl", 8)
    assert list(steps["step"]) == [0, 1, 2, 3]
    np.testing.assert_allclose(steps["rollout_s"], GEN_ASYNC)
    np.testing.assert_allclose(steps["sync_s"], SYNC)
    np.testing.assert_allclose(steps["train_s"], TRAIN)
    np.testing.assert_allclose(steps["idle_train_gpu_s"], np.array(WAIT) * 6)
    # rollout GPUs generate batch k+1 during train_k; the last step has no next batch
    expected_idle_rollout = [
        max(0, TRAIN[0] - GEN_ASYNC[1]) * 2,
        max(0, TRAIN[1] - GEN_ASYNC[2]) * 2,
        max(0, TRAIN[2] - GEN_ASYNC[3]) * 2,
        TRAIN[3] * 2,
    ]
    np.testing.assert_allclose(steps["idle_rollout_gpu_s"], expected_idle_rollout)
    assert expected_idle_rollout[1] == 5.0
    np.testing.assert_allclose(steps["start_s"].iloc[1], WAIT[0] + SYNC[0] + TRAIN[0])
    assert list(steps["rollout_weights_version"]) == [0, 0, 1, 2]
    assert set(steps["num_samples"]) == {NUM_SAMPLES} and set(steps["tokens"]) == {TOKENS}
    assert list(steps["device_roles"][0]) == ["train"] * 6 + ["rollout"] * 2
    entropy = trace.extras[trace.extras["key"] == "actor/entropy"]
    assert [json.loads(v) for v in entropy["value_json"]] == [0.125, 0.25, 0.375, 0.5]
    assert "timing_s/gen" in set(trace.extras["key"])  # the wait is kept, not lost
    notes = " ".join(trace.meta.notes)
    assert "1 records without timing_s/step" in notes and "num_samples inferred" in notes


def test_verl_one_step_off_validation_time_sits_between_steps(tmp_path):
    lines = [{"step": k + 1, "data": verl_data(k, one_step_off=True)} for k in range(3)]
    lines[1]["data"]["timing_s/testing"] = 12.5
    write_verl(tmp_path / "r.jsonl", one_step_off=True, lines=lines)
    steps = import_trace(tmp_path / "r.jsonl").steps
    step_s = [WAIT[k] + SYNC[k] + TRAIN[k] for k in range(3)]
    np.testing.assert_allclose(steps["start_s"], [0.0, step_s[0], step_s[0] + step_s[1] + 12.5])
    np.testing.assert_allclose(steps["end_s"] - steps["start_s"], step_s)
    lines[1]["data"]["timing_s/save_checkpoint"] = "slow"
    write_verl(tmp_path / "b.jsonl", one_step_off=True, lines=lines)
    with pytest.raises(TraceError, match="line 2, field 'timing_s/save_checkpoint'"):
        import_trace(tmp_path / "b.jsonl")


def test_verl_colocated_and_gpu_count_inference(tmp_path):
    path = tmp_path / "run.jsonl"
    write_verl(path, one_step_off=False)
    trace = import_trace(path)
    steps = trace.steps
    assert trace.meta.pipeline_mode is PipelineMode.COLOCATED
    np.testing.assert_allclose(steps["rollout_s"], GEN_ASYNC)
    np.testing.assert_allclose(steps["train_s"], TRAIN)
    np.testing.assert_allclose(steps["sync_s"], SYNC)
    assert set(steps["train_gpus"]) == {8} and set(steps["rollout_gpus"]) == {8}
    assert list(steps["rollout_weights_version"]) == [0, 1, 2, 3]
    assert (steps["idle_train_gpu_s"] == 0).all()
    assert any("GPU count 8 inferred" in n for n in trace.meta.notes)


def test_imported_trace_round_trips(tmp_path):
    write_verl(tmp_path / "run.jsonl", one_step_off=True)
    trace = import_trace(tmp_path / "run.jsonl")
    for name in ["out", "out.jsonl"]:
        write_trace(tmp_path / name, trace)
        back = read_trace(tmp_path / name)
        for table in TABLES:
            assert back.table(table).equals(trace.table(table)), table
        assert back.meta.notes == trace.meta.notes


def test_verl_without_throughput_assumes_and_says_so(tmp_path):
    lines = [
        {"step": k + 1, "data": {**verl_data(k, one_step_off=True), "perf/throughput": None}}
        for k in range(2)
    ]
    write_verl(tmp_path / "r.jsonl", one_step_off=True, lines=lines)
    trace = import_trace(tmp_path / "r.jsonl")
    assert trace.meta.num_gpus == 8
    assert any("assumed 8" in n for n in trace.meta.notes)
    assert any("assumed 4:4" in n for n in trace.meta.notes)


def test_verl_older_one_step_off_without_generate_async(tmp_path):
    lines = []
    for k in range(3):
        data = verl_data(k, one_step_off=True)
        del data["timing_s/generate_async"]
        lines.append({"step": k + 1, "data": data})
    write_verl(tmp_path / "r.jsonl", one_step_off=True, lines=lines)
    trace = import_trace(tmp_path / "r.jsonl")
    np.testing.assert_allclose(trace.steps["rollout_s"], WAIT[:3])
    assert any("lower bound" in n for n in trace.meta.notes)


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("timing_s/gen", "fast", "expected a number, got str"),
        ("timing_s/step", float("nan"), "is NaN"),
        ("timing_s/sync_rollout_weights", -1.0, "must be >= 0"),
        ("response_length/mean", None, "missing (required)"),
        ("timing_s/generate_async", float("inf"), "must be finite"),
    ],
)
def test_verl_bad_values_name_line_and_key(tmp_path, key, value, needle):
    lines = [{"step": k + 1, "data": verl_data(k, one_step_off=True)} for k in range(4)]
    lines[2]["data"][key] = value
    path = tmp_path / "bad.jsonl"
    write_verl(path, one_step_off=True, lines=lines)
    with pytest.raises(TraceError) as err:
        import_trace(path)
    assert str(err.value).startswith(f"{path}, line 3, field '{key}': ")
    assert needle in str(err.value)


def test_verl_structure_errors_and_lenient(tmp_path):
    good = [{"step": k + 1, "data": verl_data(k, one_step_off=True)} for k in range(4)]
    cases = {
        "malformed JSON": [*good[:2], '{"step": 3, "data": {', *good[3:]],
        "steps out of order": [*good[:3], {"step": 2, "data": good[1]["data"]}],
        'expected {"step"': [*good[:2], {"data": {}}, *good[2:]],
    }
    for needle, lines in cases.items():
        write_verl(tmp_path / "b.jsonl", one_step_off=True, lines=lines)
        with pytest.raises(TraceError, match=r"line (3|4)") as err:
            import_trace(tmp_path / "b.jsonl")
        assert needle in str(err.value)
        lenient = import_trace(tmp_path / "b.jsonl", lenient=True)
        assert len(lenient.skipped) == 1 and len(lenient.steps) == len(lines) - 1
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(TraceError, match="empty file"):
        import_trace(tmp_path / "e.jsonl")


def test_verl_batch_size_given_and_tokens_inferred(tmp_path):
    lines = [{"step": k + 1, "data": verl_data(k, one_step_off=True)} for k in range(2)]
    del lines[1]["data"]["perf/total_num_tokens"]
    write_verl(tmp_path / "r.jsonl", one_step_off=True, lines=lines)
    trace = import_trace(tmp_path / "r.jsonl", options=ImportOptions(num_samples_per_step=128))
    assert list(trace.steps["num_samples"]) == [128, 128]
    assert list(trace.steps["tokens"]) == [TOKENS, round(128 * (PROMPT_MEAN + RESP_MEAN))]
    assert any(n.startswith("tokens inferred") for n in trace.meta.notes)


def test_verl_inconsistent_gpu_options(tmp_path):
    write_verl(tmp_path / "r.jsonl", one_step_off=True)
    with pytest.raises(TraceError, match="num_gpus 16 differs"):
        import_trace(
            tmp_path / "r.jsonl", options=ImportOptions(num_gpus=16, train_gpus=6, rollout_gpus=2)
        )


def test_bad_input_reaches_the_cli_as_one_line_and_exit_2(tmp_path, capsys):
    lines = [{"step": 1, "data": {**verl_data(0, one_step_off=True), "timing_s/step": "x"}}]
    write_verl(tmp_path / "bad.jsonl", one_step_off=True, lines=lines)
    with pytest.raises(typer.Exit) as exit_info, user_errors():
        import_trace(tmp_path / "bad.jsonl")
    assert exit_info.value.exit_code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "line 1, field 'timing_s/step'" in err
    assert "Traceback" not in err


def test_shipped_examples_import():
    from importlib.resources import files

    data = files("dynaresize") / "data"
    off = import_trace(data / "verl_one_step_off_example.jsonl")
    col = import_trace(data / "verl_colocated_example.jsonl")
    assert off.meta.pipeline_mode is PipelineMode.ONE_STEP_OFF and len(off.steps) == 60
    assert (off.meta.start_train_gpus, off.meta.start_rollout_gpus) == (6, 2)  # from the sidecar
    assert "import.json" in off.meta.notes[0]
    assert col.meta.pipeline_mode is PipelineMode.COLOCATED and len(col.steps) == 30
    workload = off.to_workload()
    assert workload.num_steps == 60 and off.workload_notes()


def test_sidecar_supplies_run_facts_and_options_override_it(tmp_path):
    log = tmp_path / "run.jsonl"
    write_verl(log, one_step_off=True)
    sidecar = tmp_path / "run.jsonl.import.json"
    sidecar.write_text('{"train_gpus": 5, "rollout_gpus": 3, "model_params_b": 7.6}')
    trace = import_trace(log)
    assert set(trace.steps["train_gpus"]) == {5} and trace.meta.model_params_b == 7.6
    given = import_trace(log, options=ImportOptions(train_gpus=6, rollout_gpus=2))
    assert set(given.steps["train_gpus"]) == {6}
    sidecar.write_text('{"train_gpus": "six"}')
    with pytest.raises(TraceError, match=r"run\.jsonl\.import\.json, field 'train_gpus'"):
        import_trace(log)
    sidecar.write_text('{"train_gpu": 6}')
    with pytest.raises(TraceError, match="field 'train_gpu'"):
        import_trace(log)


# --- format detection ---------------------------------------------------------------------------


def test_detect_format(tmp_path):
    write_verl(tmp_path / "v.jsonl", one_step_off=True)
    write_trace(tmp_path / "n.jsonl", import_trace(tmp_path / "v.jsonl"))
    (tmp_path / "m.csv").write_text("step,x\n0,1\n")
    (tmp_path / "o.jsonl").write_text('{"ts": 1}\n')
    assert detect_format(tmp_path / "v.jsonl") is TraceFormat.VERL
    assert detect_format(tmp_path / "n.jsonl") is TraceFormat.NATIVE
    assert detect_format(tmp_path / "m.csv") is TraceFormat.CSV
    with pytest.raises(TraceError, match="line 1: unknown format"):
        detect_format(tmp_path / "o.jsonl")
    with pytest.raises(TraceError, match="no shipped mapping fits"):
        import_trace(tmp_path / "m.csv")


# --- CSV ----------------------------------------------------------------------------------------


def write_csv(path, header: list[str], rows: list[list]) -> None:
    text = [",".join(header)] + [",".join("" if v is None else str(v) for v in r) for r in rows]
    path.write_text("\n".join(text) + "\n")


def test_slime_csv(tmp_path):
    header = [
        "step",
        "perf/rollout_time",
        "perf/actor_train_time",
        "perf/train_wait_time",
        "perf/step_time",
        "rollout/response_len/mean",
        "rollout/response_len/max",
        "lr",
    ]
    rows = [
        [k, GEN_ASYNC[k], TRAIN[k], WAIT[k], WAIT[k] + TRAIN[k], RESP_MEAN, RESP_MAX, 1e-6]
        for k in range(4)
    ]
    write_csv(tmp_path / "slime.csv", header, rows)
    trace = import_trace(
        tmp_path / "slime.csv",
        options=ImportOptions(num_samples_per_step=NUM_SAMPLES, train_gpus=4, rollout_gpus=4),
    )
    steps = trace.steps
    assert trace.meta.importer == "csv:slime"
    np.testing.assert_allclose(steps["rollout_s"], GEN_ASYNC)
    np.testing.assert_allclose(steps["step_s"], np.add(WAIT, TRAIN))
    np.testing.assert_allclose(steps["idle_train_gpu_s"], np.array(WAIT) * 4)
    assert set(steps["tokens"]) == {round(NUM_SAMPLES * RESP_MEAN)}
    assert any("prompt lengths unknown" in n for n in trace.meta.notes)
    assert list(trace.extras["key"]) == ["lr"] * 4


def test_tracker_export_with_run_prefix_and_sparse_rows(tmp_path):
    run = "qwen-8b-run3"
    header = [
        "Step",
        f"{run} - perf/rollout_time",
        f"{run} - perf/rollout_time__MIN",
        f"{run} - perf/actor_train_time",
        f"{run} - perf/train_wait_time",
    ]
    rows = [
        [0, 30.0, 29.0, 20.0, 10.0],
        [1, None, None, None, None],  # a row where only other metrics were logged
        [2, 31.0, 30.0, 21.0, 11.0],
    ]
    write_csv(tmp_path / "export.csv", header, rows)
    trace = import_trace(tmp_path / "export.csv")
    assert list(trace.steps["step"]) == [0, 2]
    np.testing.assert_allclose(trace.steps["step_s"], [30.0, 32.0])  # wait + train, no sync
    assert any("1 rows with no stage time" in n for n in trace.meta.notes)
    assert set(trace.extras["key"]) == {f"{run} - perf/rollout_time__MIN"}


def test_openrlhf_sequential_and_areal_wait(tmp_path):
    write_csv(
        tmp_path / "o.csv",
        ["global_step", "timing/generation", "timing/ppo_train", "timing/broadcast"],
        [[1, 40.0, 20.0, 3.0], [2, 44.0, 21.0, 3.5]],
    )
    orl = import_trace(tmp_path / "o.csv", options=ImportOptions(train_gpus=4, rollout_gpus=4))
    np.testing.assert_allclose(orl.steps["step_s"], [63.0, 68.5])
    np.testing.assert_allclose(orl.steps["idle_train_gpu_s"], [43.0 * 4, 47.5 * 4])
    np.testing.assert_allclose(orl.steps["idle_rollout_gpu_s"], [23.0 * 4, 24.5 * 4])
    assert list(orl.steps["rollout_weights_version"]) == [1, 2]
    write_csv(
        tmp_path / "a.csv",
        ["step", "timeperf/rollout", "timeperf/train_step", "timeperf/update_weights"],
        [[0, 2.0, 20.0, 1.0]],
    )
    areal = import_trace(tmp_path / "a.csv", mapping="areal")
    assert areal.meta.pipeline_mode is PipelineMode.ASYNC
    np.testing.assert_allclose(areal.steps[["rollout_s", "step_s"]].iloc[0], [2.0, 23.0])
    assert any("a lower bound" in n for n in areal.meta.notes)


def test_custom_mapping_in_milliseconds(tmp_path):
    mapping = CsvMapping(
        name="mine",
        pipeline_mode=PipelineMode.COLOCATED,
        step="iter",
        step_base=1,
        time_scale_s=0.001,
        rollout_s="gen_ms",
        train_s="train_ms",
        tokens="toks",
        response_len_mean="rlen",
    )
    write_csv(
        tmp_path / "m.csv",
        ["iter", "gen_ms", "train_ms", "toks", "rlen"],
        [[1, 1500, 500, 1000, 100], [2, 1600, 400, 2000, 100]],
    )
    trace = import_trace(tmp_path / "m.csv", mapping=mapping)
    assert list(trace.steps["step"]) == [0, 1]
    np.testing.assert_allclose(trace.steps["step_s"], [2.0, 2.0])
    np.testing.assert_allclose(trace.steps["start_s"], [0.0, 2.0])
    assert list(trace.steps["num_samples"]) == [10, 20]


@pytest.mark.parametrize(
    ("cell", "needle"),
    [
        ("abc", "expected a number, got 'abc'"),
        ("nan", "is NaN"),
        ("-3", "must be >= 0"),
        ("inf", "must be finite"),
    ],
)
def test_csv_bad_cells_name_line_and_column(tmp_path, cell, needle):
    header = ["step", "timing/generation", "timing/ppo_train", "timing/broadcast"]
    write_csv(tmp_path / "o.csv", header, [[0, 40, 20, 3], [1, 40, cell, 3], [2, 40, 20, 3]])
    with pytest.raises(TraceError) as err:
        import_trace(tmp_path / "o.csv", mapping="openrlhf")
    assert f"line 3, field 'timing/ppo_train': {needle}" in str(err.value)
    lenient = import_trace(tmp_path / "o.csv", mapping="openrlhf", lenient=True)
    assert list(lenient.steps["step"]) == [0, 2] and len(lenient.skipped) == 1


def test_csv_structure_errors(tmp_path):
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(TraceError, match="empty file"):
        import_trace(tmp_path / "e.csv", mapping="slime")
    (tmp_path / "h.csv").write_text("step,timing/generation,timing/ppo_train\n")
    with pytest.raises(TraceError, match="no data rows"):
        import_trace(tmp_path / "h.csv", mapping="openrlhf")
    write_csv(
        tmp_path / "o.csv",
        ["step", "timing/generation", "timing/ppo_train"],
        [[0, 1, 1], [0, 1, 1]],
    )
    with pytest.raises(TraceError, match="line 3, field 'step': steps out of order"):
        import_trace(tmp_path / "o.csv", mapping="openrlhf")
    with pytest.raises(TraceError, match="unknown mapping 'wandb'"):
        import_trace(tmp_path / "o.csv", mapping="wandb")
