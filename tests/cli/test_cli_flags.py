"""Options: a parser error is one `error:` line naming the option; an option that would do
nothing is refused rather than ignored; validate takes only costs as calibrate wrote them."""

from __future__ import annotations

import json

import pytest
from cli_helpers import assert_one_error, invoke
from cost_files import calibrated_cost_text

from dynaresize.commands.cost_file import written_by_calibrate


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["run", "--stepz", "3"], ["--stepz"]),
        (["run", "--steps", "0"], ["'--steps'"]),
        (["run", "--steps", "abc"], ["'--steps'"]),
        (["run", "--mode", "bogus"], ["'--mode'", "bogus"]),
        (["calibrate"], ["'--trace'"]),
        (["validate", "--trace", "t", "--costs"], ["'--costs'"]),
        (["breakeven", "--trace", "t", "--confidence", "2"], ["'--confidence'"]),
        (["sweep"], ["'--config'"]),
        (["bogus"], ["bogus"]),
    ],
)
def test_a_parser_error_is_one_line_naming_the_option(args, words):
    assert_one_error(invoke(*args), *words)


def test_help_and_no_arguments_still_print_the_help():
    result = invoke("run", "--help")
    assert result.exit_code == 0 and "--mode" in result.output
    result = invoke()
    assert "Usage" in result.output and "calibrate" in result.output


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["run", "--mode", "sim", "--resume"], "--resume"),
        (["run", "--mode", "sim", "--address", "127.0.0.1:6379"], "--address"),
        (["run", "--mode", "replay", "--trace", "t", "--steps", "5"], "--steps"),
        (["run", "--mode", "replay", "--trace", "t", "--seed", "1"], "--seed"),
        (["run", "--mode", "replay", "--trace", "t", "--resume"], "--resume"),
        (["run", "--mode", "live", "--config", "live_cpu", "--trace", "t"], "--trace"),
        (["sweep", "--config", "example", "--sample-seed", "3"], "--sample-seed"),
    ],
)
def test_an_option_that_would_do_nothing_is_refused(args, option, tmp_path):
    out = tmp_path / "out"
    line = assert_one_error(invoke(*args, "--out", out), option, "does nothing")
    assert line.startswith(f"error: {option}")
    assert not out.exists()


def test_steps_beyond_a_traces_length_and_seed_with_a_trace_are_refused(tmp_path):
    trace = tmp_path / "T"
    result = invoke(
        "run", "--config", "example", "--steps", "12", "--policy", "static", "--out", trace
    )
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    common = ["run", "--config", "example", "--trace", trace, "--out", out]
    assert_one_error(invoke(*common, "--steps", "1000"), "--steps 1000", "12 steps")
    assert_one_error(invoke(*common, "--seed", "4"), "--seed", "does nothing with --trace")
    assert not out.exists()
    assert invoke(*common, "--steps", "12", "--policy", "static").exit_code == 0


# --- the cost file validate trusts -----------------------------------------------------------


def _validate(costs):
    from dynaresize.config import BUILTIN_CONFIG_DIR

    run = BUILTIN_CONFIG_DIR.parent / "data" / "live_cpu_short_tail"
    return invoke(
        "validate",
        "--trace",
        run / "trace",
        "--config",
        run / "scenario.yaml",
        "--costs",
        costs,
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", ["not a cost file dynaresize calibrate wrote", "no fitted_on stamp"]),
        ("\n\n", ["no fitted_on stamp"]),
        ("train: {fixed_overhead_s: 1.0}\n", ["no fitted_on stamp"]),
        ("cost_source: calibrated\n", ["no fitted_on stamp"]),
        (
            calibrated_cost_text({"train": {"fixed_overhead_s": 1.0}}).replace("1.0", "2.0"),
            ["section(s) train differ from what dynaresize calibrate wrote"],
        ),
    ],
)
def test_validate_refuses_a_cost_file_calibrate_did_not_write(tmp_path, text, words):
    costs = tmp_path / "costs.yaml"
    costs.write_text(text)
    assert_one_error(_validate(costs), str(costs), *words)


def test_calibrates_output_is_signed_and_validate_takes_it(tmp_path):
    from dynaresize.config import BUILTIN_CONFIG_DIR

    run = BUILTIN_CONFIG_DIR.parent / "data" / "live_cpu_short_tail"
    costs = tmp_path / "costs.yaml"
    args = ["calibrate", "--trace", run / "trace", "--config", run / "scenario.yaml"]
    result = invoke(*args, "--out", costs)
    assert result.exit_code == 0, result.output
    assert written_by_calibrate(costs)
    result = _validate(costs)
    assert result.exit_code == 0, result.output
    assert "per-step absolute error" in result.output


def test_calibrate_reports_a_trace_recorded_oversubscribed(tmp_path):
    import shutil

    from dynaresize.config import BUILTIN_CONFIG_DIR

    run = BUILTIN_CONFIG_DIR.parent / "data" / "live_cpu_short_tail"
    trace = tmp_path / "trace"
    shutil.copytree(run / "trace", trace)
    meta = json.loads((trace / "meta.json").read_text())
    meta["notes"].append("oversubscribed: 8 workers on 2 CPU cores")
    (trace / "meta.json").write_text(json.dumps(meta))
    args = ["calibrate", "--trace", trace, "--config", run / "scenario.yaml"]
    result = invoke(*args, "--out", tmp_path / "costs.yaml")
    assert result.exit_code == 0, result.output
    assert f"warning: {trace} was recorded oversubscribed" in result.output
