"""`dynaresize run --mode sim` end to end: the files it writes, their contents, and bad input."""

from __future__ import annotations

import itertools
import json

import pandas as pd
import pytest
import yaml
from twin_scenarios import raw
from typer.testing import CliRunner

from dynaresize.cli import app
from dynaresize.config import BUILTIN_CONFIG_DIR
from dynaresize.traces.schema import DecisionRecord, ResizePhaseRecord, StepRecord

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, ["run", *args])


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "run"
    result = invoke("--mode", "sim", "--config", "example", "--steps", "70", "--out", str(out))
    assert result.exit_code == 0, result.output
    return out, result.output


def test_example_writes_every_file_with_consistent_contents(example_run):
    out, output = example_run
    for name in (
        "config.json",
        "steps.parquet",
        "resizes.parquet",
        "decisions.parquet",
        "summary.json",
        "timeline.svg",
        "comparison.csv",
        "trace.json",
    ):
        assert (out / name).is_file(), name
    config = json.loads((out / "config.json").read_text())
    assert config["simulation"]["num_steps"] == 70
    assert [p["kind"] for p in config["policies"]] == ["hysteresis", "greedy"]
    assert config["cluster"]["candidate_allocations"][0] == {"train_gpus": 6, "rollout_gpus": 2}

    steps = pd.read_parquet(out / "steps.parquet")
    assert list(steps.columns) == list(StepRecord.model_fields)
    assert len(steps) == 70
    assert list(pd.read_parquet(out / "resizes.parquet").columns) == list(
        ResizePhaseRecord.model_fields
    )
    decisions = pd.read_parquet(out / "decisions.parquet")
    assert list(decisions.columns) == list(DecisionRecord.model_fields)
    assert set(decisions["policy"]) == {"hysteresis"}

    summary = json.loads((out / "summary.json").read_text())
    first = summary["policies"]["hysteresis"]
    assert first["total_s"] == pytest.approx(steps["end_s"].iloc[-1])
    assert first["num_steps"] == 70
    statics = {row["allocation"]: row["total_s"] for row in summary["static_splits"]}
    assert summary["best_static_allocation"] == min(statics, key=statics.get)
    assert first["speedup_vs_best_static"] == pytest.approx(
        min(statics.values()) / first["total_s"]
    )

    assert (out / "timeline.svg").read_text().startswith("<svg ")
    assert not (out / "timeline.png").exists()  # matplotlib's picture only when asked for
    for policy in ("hysteresis", "greedy"):
        assert (out / "policies" / policy / "steps.parquet").is_file()
    for words in ("hysteresis", "greedy", "static 6:2", "(best)", "thrash", "regret"):
        assert words in output


def test_every_row_reports_its_regret_against_the_offline_optimum(example_run):
    out, _ = example_run
    summary = json.loads((out / "summary.json").read_text())
    optimum = summary["offline_optimal"]["total_s"]
    assert optimum > 0
    rows = list(summary["policies"].values()) + summary["static_splits"]
    table = pd.read_csv(out / "comparison.csv")
    assert len(table) == len(rows) == 2 + 4
    for row in [*rows, *table.to_dict(orient="records")]:
        assert row["regret_s"] >= 0 and row["regret_pct"] >= 0
        assert row["regret_s"] == pytest.approx(row["total_s"] - optimum, abs=1e-6)
        assert row["regret_pct"] == pytest.approx(
            100 * (row["total_s"] - optimum) / optimum, abs=1e-9
        )
    # The optimum may start anywhere for free, so it is never worse than the best static split.
    assert optimum <= summary["best_static_total_s"] * (1 + 1e-12)


def test_trace_json_is_a_chrome_trace_with_one_track_per_gpu(example_run):
    out, _ = example_run
    for folder in (out, out / "policies" / "greedy"):
        trace = json.loads((folder / "trace.json").read_text())
        events = trace["traceEvents"]
        gpu_pid = next(
            e["pid"]
            for e in events
            if e.get("ph") == "M" and e["name"] == "process_name" and "GPU" in e["args"]["name"]
        )
        tracks = {
            e["tid"]: e["args"]["name"]
            for e in events
            if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == gpu_pid
        }
        assert sorted(tracks) == list(range(8))
        assert sorted(tracks.values()) == sorted(f"GPU {i}" for i in range(8))
        steps = pd.read_parquet(folder / "steps.parquet")
        for device in range(8):
            spans = [
                e
                for e in events
                if e.get("ph") == "X" and e["pid"] == gpu_pid and e["tid"] == device
            ]
            role_spans = [e for e in spans if e["cat"] == "role"]
            assert role_spans, device
            # A device's role spans follow each other without overlap inside the run and cover
            # every step (a resize stall between two roles is the only gap).
            role_spans.sort(key=lambda e: e["ts"])
            for before, after in itertools.pairwise(role_spans):
                assert before["ts"] + before["dur"] <= after["ts"] + 1e-3
            assert role_spans[-1]["ts"] + role_spans[-1]["dur"] == pytest.approx(
                steps["end_s"].iloc[-1] * 1e6, rel=1e-9
            )
            covered_us = sum(e["dur"] for e in role_spans)
            assert covered_us >= steps["step_s"].sum() * 1e6 * (1 - 1e-9)


def test_policies_from_the_command_line_replace_the_config(tmp_path):
    out = tmp_path / "r"
    result = invoke(
        "--config",
        "example",
        "--steps",
        "20",
        "--out",
        str(out),
        "--policy",
        "static",
        "--policy",
        "hysteresis:cooldown_steps=3",
    )
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert [p["kind"] for p in config["policies"]] == ["static", "hysteresis"]
    assert config["policies"][1]["cooldown_steps"] == 3
    table = pd.read_csv(out / "comparison.csv")
    static_row = table[table["name"] == "static"].iloc[0]
    split_row = table[table["name"].str.startswith("static 6:2")].iloc[0]
    assert static_row["total_s"] == pytest.approx(split_row["total_s"], rel=1e-9)


def test_costs_file_changes_the_run_and_marks_it_calibrated(tmp_path):
    costs = tmp_path / "costs.yaml"
    costs.write_text("train: {fixed_overhead_s: 30.0}\n")
    out = tmp_path / "r"
    result = invoke(
        "--config",
        "example",
        "--steps",
        "10",
        "--policy",
        "greedy",
        "--costs",
        str(costs),
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert config["costs"]["train"]["fixed_overhead_s"] == 30.0
    assert set(pd.read_parquet(out / "decisions.parquet")["cost_source"]) == {"calibrated"}
    assert (pd.read_parquet(out / "steps.parquet")["train_s"] > 30.0).all()


def bad_config(tmp_path, **override):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw(**override)))
    return str(path)


@pytest.mark.parametrize(
    ("make_args", "words"),
    [
        (lambda t: ["--config", str(t / "missing.yaml")], ["missing.yaml"]),
        (lambda t: ["--config", "example", "--policy", "telepathy"], ["telepathy"]),
        (
            lambda t: [
                "--config",
                bad_config(t, cluster={"candidate_allocations": ["6:2", "7:2"]}),
            ],
            ["7:2", "9 GPUs"],
        ),
        (
            lambda t: [
                "--config",
                bad_config(
                    t,
                    cluster={
                        "rollout_tensor_parallel_size": 2,
                        "candidate_allocations": ["6:2", "5:3"],
                    },
                ),
            ],
            ["5:3", "divisible"],
        ),
        (
            lambda t: [
                "--config",
                bad_config(
                    t, model={"num_params_b": 20}, cluster={"candidate_allocations": ["6:2", "2:6"]}
                ),
            ],
            ["candidate 2:6", "GB"],
        ),
        (
            lambda t: [
                "--config",
                bad_config(t, costs={"train": {"fixed_overhead_s": float("nan")}}),
            ],
            ["costs.train.fixed_overhead_s"],
        ),
        (
            lambda t: ["--config", bad_config(t, simulation={"num_steps": -4})],
            ["simulation.num_steps"],
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_output_folder(tmp_path, make_args, words):
    out = tmp_path / "out"
    result = invoke("--mode", "sim", *make_args(tmp_path), "--out", str(out))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert "Traceback" not in result.output
    for word in words:
        assert word in lines[0]
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_invalid_yaml_names_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("cluster:\n  gpus_per_node: [8\nmodel: {}\n")
    result = invoke("--config", str(path), "--out", str(tmp_path / "o"))
    assert result.exit_code == 2
    assert "broken.yaml" in result.output and "line" in result.output


def test_replay_without_trace_is_an_input_error(tmp_path):
    result = invoke("--mode", "replay", "--out", str(tmp_path / "o"))
    assert result.exit_code == 2
    assert "--trace" in result.output


def test_sim_takes_the_workload_from_a_trace(example_run, tmp_path):
    source, _ = example_run
    out = tmp_path / "from-trace"
    result = invoke(
        "--config",
        "example",
        "--trace",
        str(source),
        "--policy",
        "static",
        "--steps",
        "25",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    steps = pd.read_parquet(out / "steps.parquet")
    recorded = pd.read_parquet(source / "steps.parquet")
    assert len(steps) == 25
    assert json.loads((out / "config.json").read_text())["simulation"]["num_steps"] == 25
    # The trace's per-step token counts carry over into the simulated steps.
    assert (steps["num_samples"].to_numpy() == recorded["num_samples"].to_numpy()[:25]).all()


def test_replay_writes_a_chrome_trace_of_the_replayed_policy(example_run, tmp_path):
    source, _ = example_run
    out = tmp_path / "replay"
    result = invoke(
        "--mode", "replay", "--trace", str(source), "--policy", "static", "--out", str(out)
    )
    assert result.exit_code == 0, result.output
    trace = json.loads((out / "trace.json").read_text())
    gpu_tracks = {
        e["tid"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e["name"] == "thread_name" and e["args"]["name"].startswith("GPU")
    }
    assert gpu_tracks == set(range(8))
    steps = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "step"]
    assert len(steps) == 70


def test_out_that_is_a_file_is_an_input_error(tmp_path):
    target = tmp_path / "taken"
    target.write_text("not a folder")
    result = invoke(
        "--config", "example", "--steps", "5", "--policy", "static", "--out", str(target)
    )
    assert result.exit_code == 2 and "not a folder" in result.output
    assert target.read_text() == "not a folder"


def test_the_matplotlib_timeline_is_drawn_when_asked_for(tmp_path):
    config = tmp_path / "c.yaml"
    data = yaml.safe_load((BUILTIN_CONFIG_DIR / "example.yaml").read_text())
    data["output"] = {"timeline_png": True, "timeline_svg": False}
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "r"
    result = invoke(
        "--config", str(config), "--steps", "5", "--policy", "static", "--out", str(out)
    )
    assert result.exit_code == 0, result.output
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "timeline.svg").exists()


def _config_with_output(tmp_path, output: dict):
    config = tmp_path / "c.yaml"
    data = yaml.safe_load((BUILTIN_CONFIG_DIR / "example.yaml").read_text())
    data["output"] = output
    config.write_text(yaml.safe_dump(data))
    return config


def test_the_chrome_trace_shows_as_many_steps_as_the_config_says_and_says_so(tmp_path):
    config = _config_with_output(tmp_path, {"chrome_trace_max_steps": 12})
    out = tmp_path / "r"
    result = invoke("--config", str(config), "--steps", "30", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "trace.json shows the first 12 of 30 steps" in result.output
    trace = json.loads((out / "trace.json").read_text())
    assert trace["otherData"]["steps_shown"] == [0, 11]
    assert trace["otherData"]["steps_in_run"] == 30
    steps = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "step"]
    assert len(steps) == 12
    assert len(pd.read_parquet(out / "steps.parquet")) == 30  # the tables keep every step
    every = _config_with_output(tmp_path, {"chrome_trace_max_steps": None})
    result = invoke("--config", str(every), "--steps", "30", "--out", str(tmp_path / "all"))
    assert result.exit_code == 0 and "trace.json shows" not in result.output
    trace = json.loads((tmp_path / "all" / "trace.json").read_text())
    assert "steps_in_run" not in trace["otherData"]


def test_a_chrome_trace_of_no_steps_is_refused(tmp_path):
    config = _config_with_output(tmp_path, {"chrome_trace_max_steps": 0})
    result = invoke("--config", str(config), "--steps", "5", "--out", str(tmp_path / "r"))
    assert result.exit_code == 2
    assert "chrome_trace_max_steps" in result.output
    assert not (tmp_path / "r").exists()
