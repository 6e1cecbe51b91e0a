"""Every error line names the file given on the command line that it is about."""

from __future__ import annotations

import pytest
import yaml
from cli_helpers import assert_one_error, invoke

from dynaresize.commands.guard import name_the_file
from dynaresize.config import resolve_config_path


def test_a_message_naming_no_given_file_gets_the_main_input():
    assert name_the_file("the trace has no steps", ["runs/a/trace", None]) == (
        "runs/a/trace: the trace has no steps"
    )
    # Already named (by path, or by a file name with an extension), about an option, or no
    # file given: unchanged.
    inside = "runs/a/trace/steps.parquet, row 3: bad"
    assert name_the_file(inside, ["runs/a/trace"]) == inside
    assert name_the_file("c.yaml: bad", ["x.jsonl", "conf/c.yaml"]) == "c.yaml: bad"
    assert name_the_file("--steps 5: too many", ["x.jsonl"]) == "--steps 5: too many"
    assert name_the_file("bad", [None]) == "bad"


@pytest.fixture(scope="module")
def twin_trace(tmp_path_factory):
    """A twin run's trace: steps and decisions, but no per-sample lengths."""
    folder = tmp_path_factory.mktemp("messages")
    data = yaml.safe_load(resolve_config_path("example").read_text())
    data["simulation"]["num_steps"] = 8
    data["policies"] = [{"kind": "static"}]
    data["output"] = {"timeline_png": False}
    (folder / "quick.yaml").write_text(yaml.safe_dump(data))
    result = invoke("run", "--config", folder / "quick.yaml", "--out", folder / "T")
    assert result.exit_code == 0, result.output
    (folder / "T" / "samples.parquet").unlink()  # a trace with step records only
    return folder


def test_analysis_errors_name_the_trace(twin_trace, tmp_path):
    from cost_files import calibrated_cost_text

    costs = tmp_path / "costs.yaml"
    costs.write_text(calibrated_cost_text({"train": {"fixed_overhead_s": 1.0}}))
    trace = twin_trace / "T"
    result = invoke("validate", "--trace", trace, "--costs", costs)
    assert_one_error(result, str(trace), "per-sample lengths")


def test_sweep_errors_name_the_config(twin_trace):
    config = twin_trace / "quick.yaml"
    result = invoke("sweep", "--config", config, "--param", "policy.cooldown_steps=1,2")
    assert_one_error(result, str(config), "cooldown_steps")


def test_a_multi_line_message_is_one_line(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("cluster: {gpus_per_node: 8}\nmodel: {num_params_b: 1}\n")
    line = assert_one_error(invoke("run", "--config", config), str(config))
    assert "\n" not in line
