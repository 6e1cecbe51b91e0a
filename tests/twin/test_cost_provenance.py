"""Cost files say what they were fitted on: a preset used outside its model sizes warns with the
range, no per-GB rate implies a transfer faster than the configured link, and validate takes only
cost files calibrate wrote, on the run's own scenario unless told otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner
from verl_log_factory import one_step_off_run, write_log

import dynaresize
from dynaresize.cli import app
from dynaresize.config import builtin_config_names
from dynaresize.traces.phases import StrategyName
from dynaresize.twin.analysis_context import context_from_config
from dynaresize.twin.costs import load_costs
from dynaresize.twin.costs.memory import ModelConfig
from dynaresize.twin.costs.resize import ResizeCostParams, plan_resize
from dynaresize.twin.run_facts import RunFacts

PACKAGE = Path(dynaresize.__file__).resolve().parent
PRESET = PACKAGE / "cost_presets" / "h200_resize.yaml"
LIVE_RUN = PACKAGE / "data" / "live_cpu_long_tail"


def test_the_resize_preset_is_not_a_run_config_and_records_its_range():
    assert not [name for name in builtin_config_names() if "cost" in name]
    fitted_on = load_costs(PRESET).fitted_on
    assert fitted_on is not None
    assert (fitted_on.model_params_b_min, fitted_on.model_params_b_max) == (0.5, 1.5)


def test_a_preset_outside_its_model_sizes_warns_with_the_range(tmp_path):
    log = tmp_path / "run.jsonl"
    write_log(log, one_step_off_run(12))
    from dynaresize.twin.trace_source import open_trace

    trace = open_trace(log)
    big = context_from_config(None, [trace], costs_path=PRESET, facts=RunFacts(model_params_b=8.2))
    (warning,) = big.warnings
    assert "fitted on 0.5-1.5B models on 1x NVIDIA H200" in warning and "8.2B" in warning
    small = context_from_config(None, [trace], costs_path=PRESET, facts=RunFacts(model_params_b=1))
    assert small.warnings == ()
    args = ["breakeven", "--trace", str(log), "--costs", str(PRESET), "--model-params-b", "8.2"]
    output = CliRunner().invoke(app, args).output
    assert "warning: the cost parameters were fitted on 0.5-1.5B models" in output


@settings(max_examples=60, deadline=None)
@given(
    size_b=st.floats(0.1, 80.0),
    trainers=st.tuples(st.integers(1, 7), st.integers(1, 7)) | st.none(),
    strategy=st.sampled_from([StrategyName.OVERLAPPED, StrategyName.STOP_AND_REBUILD]),
    host_gbps=st.floats(1.0, 100.0),
    link_gbps=st.floats(1.0, 900.0),
)
def test_no_phase_moves_bytes_faster_than_its_link(
    size_b, trainers, strategy, host_gbps, link_gbps
):
    params = load_costs(PRESET).resize
    for table in (params, ResizeCostParams()):
        plan = plan_resize(
            strategy=strategy,
            model=ModelConfig(num_params_b=size_b),
            params=table,
            host_bandwidth_gbps=host_gbps,
            interconnect_bandwidth_gbps=link_gbps,
            trainers_before=trainers[0] if trainers else None,
            trainers_after=trainers[1] if trainers else None,
        )
        lanes = min(trainers) if trainers else 1
        capacity = max(host_gbps * lanes, link_gbps)
        for phase in plan.phases:
            if phase.bytes_moved:
                assert phase.bytes_moved / 1e9 <= phase.duration_s * capacity * (1 + 1e-9)
    # the case: 114.8 GB of an 8.2B model's state exported in 1.5 ms is impossible
    export = plan_resize(
        strategy=StrategyName.OVERLAPPED,
        model=ModelConfig(num_params_b=8.2),
        params=load_costs(PRESET).resize,
        host_bandwidth_gbps=25.0,
        interconnect_bandwidth_gbps=400.0,
    ).phases[0]
    assert export.duration_s >= 114.8 / 25.0


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("provenance")
    costs = folder / "costs.yaml"
    args = ["calibrate", "--trace", str(LIVE_RUN / "trace"), "--out", str(costs)]
    args += ["--config", str(LIVE_RUN / "scenario.yaml")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return costs


def _validate(costs: Path, *extra: str):
    args = ["validate", "--trace", str(LIVE_RUN / "trace"), "--costs", str(costs), *extra]
    return CliRunner().invoke(app, args)


def test_validate_takes_calibrates_file_and_refuses_a_hand_written_or_edited_one(
    calibrated, tmp_path
):
    ok = _validate(calibrated)
    assert ok.exit_code == 0, ok.output
    assert "scenario: the run's own" in ok.output
    mapping = yaml.safe_load(calibrated.read_text())
    hand = {k: v for k, v in mapping.items() if k != "fitted_on"}
    (tmp_path / "hand.yaml").write_text(yaml.safe_dump(hand))
    refused = _validate(tmp_path / "hand.yaml")
    assert refused.exit_code == 2
    assert "not a cost file dynaresize calibrate wrote" in refused.output
    key = next(k for k, v in mapping["train"].items() if isinstance(v, float))
    mapping["train"][key] = 2 * mapping["train"][key] + 1.0
    (tmp_path / "edited.yaml").write_text(yaml.safe_dump(mapping))
    edited = _validate(tmp_path / "edited.yaml")
    assert edited.exit_code == 2 and "section(s) train differ" in edited.output
    forced = _validate(tmp_path / "edited.yaml", "--force")
    assert forced.exit_code == 0 and "--force" in forced.output


def test_validate_names_how_a_config_differs_from_the_runs_own_scenario(calibrated):
    refused = _validate(calibrated, "--config", "live_cpu")
    assert refused.exit_code == 2
    assert "pipeline.mode: given one_step_off, recorded sync" in refused.output
    assert "model.num_params_b" in refused.output
    forced = _validate(calibrated, "--config", "live_cpu", "--force")
    assert forced.exit_code == 0 and "differs from" in forced.output
