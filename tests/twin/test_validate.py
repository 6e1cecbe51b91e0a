"""Closing the loop: calibrate from a run, replay it in the twin, measure the twin's error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
import yaml
from cost_files import calibrated_cost_text
from twin_scenarios import raw, scenario
from typer.testing import CliRunner

from dynaresize.commands import validate as validate_command
from dynaresize.policies.types import CostSource
from dynaresize.traces.io import Trace, write_trace
from dynaresize.traces.schema import RunMeta
from dynaresize.twin.analysis_context import context_from_config
from dynaresize.twin.calibration import fit_costs, fitted_overrides
from dynaresize.twin.calibration.validate import (
    ValidationInputError,
    recorded_decision_schedule,
    validate_trace,
)
from dynaresize.twin.costs.provenance import CALIBRATE, FittedOn, stamped
from dynaresize.twin.simulation import build_context, simulate

SCHEDULE = [{"step": 9, "allocation": "4:4"}, {"step": 20, "allocation": "5:3"}]
DATA_DIR = Path(__file__).resolve().parents[2] / "dynaresize" / "data"


def _samples_frame(workload) -> pd.DataFrame:
    index = workload.step_index()
    return pd.DataFrame(
        {
            "schema_version": 1,
            "step": index,
            "sample_index": np.arange(len(index)) - workload.step_offsets[index],
            "prompt_tokens": workload.prompt_tokens,
            "response_tokens": workload.response_tokens,
            "rollout_replica": [None] * len(index),
            "device": [None] * len(index),
            "finish_s": [None] * len(index),
        }
    )


def twin_run_trace(
    *, noise: float = 0.0, seed: int = 0, source: str = "twin", **overrides
) -> tuple[Trace, object]:
    """A twin run of the tiny scenario with two scheduled resizes, as a measured trace.

    With `noise`, every step's stage and step times, and every gap between steps (the resize
    stalls), are scaled by their own factor 1 + noise * N(0, 1), as a measurement would jitter.
    """
    config = scenario(**overrides)
    result = simulate(config, {"kind": "scheduled", "schedule": SCHEDULE})
    steps = result.steps.copy()
    rng = np.random.default_rng(seed)
    n = len(steps)
    if noise:
        factor = 1 + noise * rng.standard_normal(n)
        for column in ("rollout_s", "train_s", "sync_s", "step_s"):
            steps[column] = steps[column] * factor
        gaps = steps["start_s"].to_numpy()[1:] - steps["end_s"].to_numpy()[:-1]
        gaps = gaps * (1 + noise * rng.standard_normal(n - 1))
        start = np.concatenate([[0.0], np.cumsum(steps["step_s"].to_numpy()[:-1] + gaps)])
        steps["start_s"] = start
        steps["end_s"] = start + steps["step_s"]
    meta = RunMeta(
        source=source,
        model_params_b=config.model.num_params_b,
        num_gpus=config.cluster.total_gpus,
        pipeline_mode=config.pipeline.mode.value
        if config.pipeline.mode.value != "sync"
        else "sync_disaggregated",
    )
    trace = Trace(
        meta=meta,
        steps=steps,
        resizes=result.resizes,
        decisions=result.decisions,
        samples=_samples_frame(result.context.workload),
    ).validated(source="test")
    return trace, config


def calibrated(config):
    return config.costs.model_copy(update={"cost_source": CostSource.CALIBRATED})


def test_a_twin_run_replayed_with_its_own_costs_has_no_error():
    trace, config = twin_run_trace()
    context = context_from_config(config, [trace]).with_costs(calibrated(config))
    report = validate_trace(trace, context)
    assert report.per_step["step_ape"].max() < 1e-9
    assert abs(report.total_time_error) < 1e-9
    assert len(report.resizes) == 2
    assert abs(report.resize_critical_error) < 1e-9
    assert report.resizes["measured_critical_s"].min() > 100  # the paper-sized overlapped resize
    # In the twin nothing else happens at a boundary: the critical phases are the whole gap.
    np.testing.assert_allclose(
        report.resizes["measured_phase_span_s"], report.resizes["measured_critical_s"]
    )


def _fit(trace, config):
    return fit_costs([trace], base=config.costs, model=config.model, sync_bandwidth_gbps=400.0)


def test_calibration_from_a_noisy_run_recovers_the_costs_and_predicts_the_run():
    truth = scenario()
    trace, config = twin_run_trace(noise=0.03, seed=1, pipeline={"mode": "sync"})
    fit = _fit(trace, config)
    # Decode cost per active sequence is identified on its own; the four training parameters
    # trade off against each other under noise, so what is checked there is what they predict:
    # every stage time on every candidate split, including the one the run never used.
    assert fit.costs.rollout.decode_s_per_active_seq == pytest.approx(
        truth.costs.rollout.decode_s_per_active_seq, rel=0.1
    )
    workload = trace.to_workload()
    true_costs = build_context(config, workload=workload, costs=truth.costs).step_costs
    fitted_costs = build_context(config, workload=workload, costs=fit.costs).step_costs
    for stage in ("rollout_s", "train_s"):
        ratio = getattr(fitted_costs, stage) / getattr(true_costs, stage)
        assert np.abs(np.median(ratio - 1, axis=0)).max() < 0.04, stage
    context = context_from_config(config, [trace]).with_costs(fit.costs)
    report = validate_trace(trace, context)
    # 3% multiplicative noise: the median absolute error of a normal is 0.67 sigma.
    assert report.median_step_ape < 0.03
    assert report.p90_step_ape < 0.07
    assert abs(report.total_time_error) < 0.02
    assert abs(report.resize_critical_error) < 0.05


def test_one_step_off_run_with_resizes_fits_its_rollout_exactly():
    trace, config = twin_run_trace()
    fit = _fit(trace, config)
    assert fit.stage("rollout").max_abs_residual_s < 1e-6


def test_one_step_off_noisy_run_is_predicted_within_the_noise():
    trace, config = twin_run_trace(noise=0.03, seed=1)
    context = context_from_config(config, [trace]).with_costs(_fit(trace, config).costs)
    report = validate_trace(trace, context)
    # Within the noise.
    assert report.median_step_ape < 0.06
    assert abs(report.total_time_error) < 0.02
    assert abs(report.resize_critical_error) < 0.05


def test_a_wrong_model_shows_up_as_error():
    trace, config = twin_run_trace()
    slow = calibrated(config).with_overrides(
        {"train": {"s_per_token_one_gpu": 1.5 * config.costs.train.s_per_token_one_gpu}}
    )
    report = validate_trace(trace, context_from_config(config, [trace]).with_costs(slow))
    assert report.median_step_ape > 0.05
    assert report.total_time_error > 0.05
    # Per-token work grew by half; fixed and optimizer time did not.
    assert 0.3 < report.stage_median_ape("train") < 0.5
    assert report.stage_median_ape("rollout") < 1e-9


def test_executor_layout_generates_the_first_batch_before_step_zero():
    trace, config = twin_run_trace(source="executor")
    # The executor starts step 0 once batch 0 exists: shift the twin's run to that layout.
    prelude = float(trace.steps["rollout_s"].iloc[0])
    steps = trace.steps.copy()
    steps.loc[0, "step_s"] -= prelude
    steps["start_s"] = np.where(steps["step"] == 0, steps["start_s"], steps["start_s"] - prelude)
    steps["end_s"] = steps["end_s"] - prelude
    steps["start_s"] += 5.0  # setup time before the run's first step
    steps["end_s"] += 5.0
    trace = Trace(
        meta=trace.meta,
        steps=steps,
        resizes=trace.resizes,
        decisions=trace.decisions,
        samples=trace.samples,
    )
    context = context_from_config(config, [trace]).with_costs(calibrated(config))
    report = validate_trace(trace, context)
    assert report.per_step["step_ape"].max() < 1e-9
    assert abs(report.total_time_error) < 1e-9
    assert any("before step 0" in note for note in report.notes)


def test_sync_mode_run_validates():
    trace, config = twin_run_trace(pipeline={"mode": "sync"})
    context = context_from_config(config, [trace]).with_costs(calibrated(config))
    report = validate_trace(trace, context)
    assert report.pipeline_mode.value == "sync"
    assert report.per_step["step_ape"].max() < 1e-9


def test_schedule_comes_from_the_decision_records():
    trace, _ = twin_run_trace()
    first, schedule = recorded_decision_schedule(trace)
    assert first.label == "6:2"
    assert schedule == SCHEDULE


def test_a_resize_decided_but_never_carried_out_is_not_replayed():
    """A resize decided after the last step of a run (or of a resumed leg) never happens."""
    trace, config = twin_run_trace()
    decisions = trace.decisions.copy()
    at = decisions["step"] == 14
    decisions.loc[at, ["decision", "to_allocation", "resize_id"]] = ["resize", "3:5", 7]
    leg = Trace(meta=trace.meta, steps=trace.steps, decisions=decisions, samples=trace.samples)
    _, schedule = recorded_decision_schedule(leg)
    assert schedule == SCHEDULE
    context = context_from_config(config, [leg]).with_costs(calibrated(config))
    assert validate_trace(leg, context).per_step["step_ape"].max() < 1e-9


def test_decisions_that_contradict_the_steps_are_refused():
    trace, config = twin_run_trace()
    decisions = trace.decisions.copy()
    decisions.loc[decisions["step"] == 9, "to_allocation"] = "3:5"
    bad = Trace(meta=trace.meta, steps=trace.steps, decisions=decisions, samples=trace.samples)
    context = context_from_config(config, [bad]).with_costs(calibrated(config))
    with pytest.raises(ValidationInputError, match="step 10 ran on 4:4 but"):
        validate_trace(bad, context)


def test_refusals_name_the_problem():
    trace, config = twin_run_trace()
    context = context_from_config(config, [trace])
    with pytest.raises(ValidationInputError, match="cost_source: model"):
        validate_trace(trace, context)
    context = context.with_costs(calibrated(config))
    no_samples = Trace(meta=trace.meta, steps=trace.steps, decisions=trace.decisions)
    with pytest.raises(ValidationInputError, match="per-sample lengths for 30 of 30"):
        validate_trace(no_samples, context)
    no_decisions = Trace(meta=trace.meta, steps=trace.steps, samples=trace.samples)
    with pytest.raises(ValidationInputError, match="no decision records"):
        validate_trace(no_decisions, context)
    narrow = scenario(cluster={"candidate_allocations": ["6:2", "5:3"]})
    narrow_context = context_from_config(narrow, [trace]).with_costs(calibrated(narrow))
    with pytest.raises(ValidationInputError, match="ran on 4:4, not among"):
        validate_trace(trace, narrow_context)


# --- the command line -----------------------------------------------------------------------


def _cli() -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False)
    validate_command.register(app)
    app.command("noop")(lambda: None)
    return app


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("validate")
    trace, config = twin_run_trace(noise=0.02, seed=4)
    write_trace(folder / "trace", trace)
    (folder / "config.yaml").write_text(yaml.safe_dump(raw()))
    costs = fitted_overrides(_fit(trace, config))
    costs["resize"] = config.costs.resize.model_dump(mode="json")
    # as dynaresize calibrate writes it: every section stamped
    stamp = FittedOn(written_by=CALIBRATE, model_params_b_min=8.0, model_params_b_max=8.0)
    (folder / "costs.yaml").write_text(yaml.safe_dump(stamped(costs, stamp)))
    return folder


def test_cli_reports_and_writes_every_output(files):
    out = files / "report"
    args = ["validate", "--trace", str(files / "trace"), "--costs", str(files / "costs.yaml")]
    args += ["--config", str(files / "config.yaml"), "--out", str(out)]
    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 0, result.output
    assert "per-step absolute error: median" in result.output
    assert "resize critical path (2 resizes, overlapped)" in result.output
    assert {p.name for p in out.iterdir()} == {
        ".dynaresize-output.json",
        "validation.json",
        "per_step.csv",
        "resizes.csv",
        "validation.png",
    }
    import json

    figures = json.loads((out / "validation.json").read_text())
    for key in (
        "step_ape_median",
        "step_ape_p90",
        "total_time_error",
        "resize_critical_error",
        "measured_total_s",
        "predicted_total_s",
    ):
        assert np.isfinite(figures[key]), key
    assert figures["step_ape_median"] < 0.06
    assert (out / "validation.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"trace": "missing"}, "file not found"),
        ({"costs": "missing.yaml"}, "file not found"),
        ({"costs": "model_costs.yaml"}, "cost_source: model"),
        ({"costs": "broken.yaml"}, "invalid YAML"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(files, change, message):
    model_costs = calibrated_cost_text({"cost_source": "model", "train": {"fixed_overhead_s": 1}})
    (files / "model_costs.yaml").write_text(model_costs)
    (files / "broken.yaml").write_text("rollout: [unclosed\n")
    out = files / f"never_{len(message)}"
    args = [
        "validate",
        "--trace",
        str(files / change.get("trace", "trace")),
        "--costs",
        str(files / change.get("costs", "costs.yaml")),
        "--config",
        str(files / "config.yaml"),
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()


# --- a real CPU live run shipped in the repository --------------------------------------------


def _live_traces() -> list[Path]:
    return sorted(p / "trace" for p in DATA_DIR.glob("live_cpu_*") if (p / "trace").is_dir())


@pytest.mark.skipif(not _live_traces(), reason="no live CPU trace shipped yet")
def test_validate_on_a_shipped_live_cpu_run(tmp_path):
    held_out, *fitting = _live_traces()[::-1]
    folder = held_out.parent
    config = str(folder / "scenario.yaml")
    costs = tmp_path / "costs.yaml"
    from dynaresize.commands import calibrate as calibrate_command

    app = _cli()
    calibrate_command.register(app)
    fit_args = ["calibrate", "--config", config, "--out", str(costs)]
    for trace in fitting or [held_out]:
        fit_args += ["--trace", str(trace)]
    result = CliRunner().invoke(app, fit_args)
    assert result.exit_code == 0, result.output
    out = tmp_path / "report"
    args = ["validate", "--trace", str(held_out), "--costs", str(costs), "--config", config]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    import json

    figures = json.loads((out / "validation.json").read_text())
    assert figures["num_resizes"] >= 1
    assert figures["num_steps"] >= 4
    for key in ("step_ape_median", "step_ape_p90", "total_time_error", "resize_critical_error"):
        assert np.isfinite(figures[key]), key
