"""Stage-cost fitting recovers the parameters that generated a trace, and says what it assumed."""

from __future__ import annotations

import numpy as np
import pytest
import typer
from analysis_traces import lognormal_workload, trace_from_costs
from typer.testing import CliRunner

from dynaresize.commands import calibrate as calibrate_command
from dynaresize.traces.io import write_trace
from dynaresize.twin.calibration import FitError, fit_costs
from dynaresize.twin.costs import CostModels, load_costs
from dynaresize.twin.costs.memory import ModelConfig

MODEL = ModelConfig(num_params_b=8)
TRUE = CostModels().with_overrides(
    {
        "rollout": {
            "decode_base_s_per_iter": 0.021,
            "decode_s_per_active_seq": 2.4e-4,
            "prefill_s_per_token": 8e-5,
        },
        "train": {
            "s_per_token_one_gpu": 3.1e-4,
            "scaling_efficiency_per_doubling": 0.9,
            "fixed_overhead_s": 2.0,
            "optimizer_s_per_gb_shard": 0.08,
            "collective_s_per_gb_per_extra_gpu": 0.01,
        },
        "sync": {"latency_s": 1.7},
    }
)


@pytest.fixture(scope="module")
def workload():
    return lognormal_workload(90, 48, seed=3, growth=1.0)


def test_noise_free_trace_recovers_rollout_and_sync(workload):
    trace = trace_from_costs(workload, costs=TRUE, model=MODEL, train_gpus=6)
    fit = fit_costs([trace], model=MODEL, sync_bandwidth_gbps=400.0)
    for name in ("decode_base_s_per_iter", "decode_s_per_active_seq", "prefill_s_per_token"):
        assert getattr(fit.costs.rollout, name) == pytest.approx(
            getattr(TRUE.rollout, name), rel=1e-4
        )
    assert fit.stage("rollout").r2 == pytest.approx(1.0, abs=1e-9)
    assert fit.costs.sync.latency_s == pytest.approx(1.7, rel=1e-9)
    assert fit.costs.cost_source.value == "calibrated"


def test_one_allocation_holds_scaling_and_says_so(workload):
    trace = trace_from_costs(workload, costs=TRUE, model=MODEL, train_gpus=6)
    base = CostModels()
    fit = fit_costs([trace], base=base, model=MODEL, sync_bandwidth_gbps=400.0)
    train = fit.stage("train")
    assert train.r2 == pytest.approx(1.0, abs=1e-6)
    assert (
        fit.costs.train.scaling_efficiency_per_doubling
        == base.train.scaling_efficiency_per_doubling
    )
    assert any("one training allocation (6 GPUs)" in a for a in train.assumptions)
    assert any("scaling efficiency held at" in line for line in fit.report_lines())
    # it still predicts the measured allocation exactly
    np.testing.assert_allclose(train.predicted_s, train.measured_s, rtol=1e-6)


def test_several_allocations_recover_the_scaling_curve(workload):
    gpus = np.repeat([6, 4, 2], 30)
    trace = trace_from_costs(workload, costs=TRUE, model=MODEL, train_gpus=gpus)
    fit = fit_costs([trace], model=MODEL, sync_bandwidth_gbps=400.0)
    for name in type(TRUE.train).model_fields:
        assert getattr(fit.costs.train, name) == pytest.approx(
            getattr(TRUE.train, name), rel=1e-3, abs=1e-9
        ), name
    assert any("3 training allocations" in a for a in fit.stage("train").assumptions)
    # rollout with several replica counts too
    assert fit.costs.rollout.decode_s_per_active_seq == pytest.approx(2.4e-4, rel=1e-4)


def test_contention_and_first_step_warmup_are_recovered(workload):
    """Replicas that share a device stretch the rollout; a run's first step pays a warm-up. Both
    are recovered from a trace over three splits, and the rates are not biased by the warm-up."""
    true = TRUE.with_overrides(
        {
            "rollout": {"replica_contention_per_extra": 0.3, "first_step_warmup_s": 1.5},
            "train": {"first_step_warmup_s": 4.0},
        }
    )
    gpus = np.repeat([6, 4, 2], 30)
    trace = trace_from_costs(workload, costs=true, model=MODEL, train_gpus=gpus)
    fit = fit_costs([trace], model=MODEL, sync_bandwidth_gbps=400.0)
    rollout, train = fit.costs.rollout, fit.costs.train
    assert rollout.replica_contention_per_extra == pytest.approx(0.3, rel=1e-4)
    assert rollout.first_step_warmup_s == pytest.approx(1.5, rel=1e-4)
    assert rollout.decode_base_s_per_iter == pytest.approx(0.021, rel=1e-4)
    assert train.first_step_warmup_s == pytest.approx(4.0, rel=1e-4)
    assert train.s_per_token_one_gpu == pytest.approx(3.1e-4, rel=1e-3)
    assert any("contention between replicas fitted" in a for a in fit.stage("rollout").assumptions)


def test_one_allocation_does_not_count_configured_collectives_twice(workload):
    """With one split the intercept already holds every per-GPU term: configured all-reduce and
    collective rates are scaled into it, not added on top."""
    trace = trace_from_costs(workload, costs=TRUE, model=MODEL, train_gpus=6)
    base = CostModels().with_overrides(
        {"train": {"allreduce_s_per_gb": 0.5, "collective_s_per_gb_per_extra_gpu": 0.1}}
    )
    fit = fit_costs([trace], base=base, model=MODEL, sync_bandwidth_gbps=400.0)
    train = fit.stage("train")
    np.testing.assert_allclose(train.predicted_s, train.measured_s, rtol=1e-6)


def _fit_two_runs_of_one_per_gpu_term(term: dict[str, float], allocations: list[int]):
    """The fit of two runs (30 steps per allocation each) whose training time has, beside the
    fixed and per-token costs, only the per-GPU `term`."""
    zero = {
        "optimizer_s_per_gb_shard": 0.0,
        "collective_s_per_gb_per_extra_gpu": 0.0,
        "allreduce_s_per_gb": 0.0,
    }
    true = TRUE.with_overrides({"train": {**zero, **term}})
    gpus = np.repeat(allocations, 30)
    runs = [
        trace_from_costs(
            lognormal_workload(90, 48, seed=s, growth=1.0), costs=true, model=MODEL, train_gpus=gpus
        )
        for s in (3, 4)
    ]
    return fit_costs(runs, model=MODEL, sync_bandwidth_gbps=400.0)


def test_the_ring_allreduce_form_and_the_per_token_term_are_chosen_by_the_times():
    """Steps that get slower with more trainers (a ring all-reduce over a slow link) pick the
    all-reduce form; a real per-token cost survives leave-one-run-out (two runs)."""
    fit = _fit_two_runs_of_one_per_gpu_term({"allreduce_s_per_gb": 0.3}, [6, 4, 2])
    train = fit.costs.train
    assert train.allreduce_s_per_gb == pytest.approx(0.3, rel=1e-3)
    assert train.optimizer_s_per_gb_shard == 0.0
    assert train.s_per_token_one_gpu == pytest.approx(3.1e-4, rel=1e-3)
    notes = fit.stage("train").assumptions
    assert any("per-token cost kept" in a and "of 2 held-out runs" in a for a in notes)
    assert any("ring all-reduce" in a for a in notes)


def test_an_exchange_flat_beyond_one_trainer_is_chosen_by_the_times():
    """Trainers that share one device exchange gradients through host memory at about the same
    cost for two ranks as for three: neither the ring (0, 1, 4/3) nor the shard (1, 1/2, 1/3)
    shape reproduces one, two and three trainers; the flat exchange does, and predicts the
    measured steps."""
    fit = _fit_two_runs_of_one_per_gpu_term({"exchange_s_per_gb": 0.4}, [1, 2, 3])
    train = fit.costs.train
    assert train.exchange_s_per_gb == pytest.approx(0.4, rel=1e-3)
    assert train.allreduce_s_per_gb == 0.0 and train.optimizer_s_per_gb_shard == 0.0
    assert any("exchange flat beyond one GPU" in a for a in fit.stage("train").assumptions)
    stage = fit.stage("train")
    np.testing.assert_allclose(stage.predicted_s, stage.measured_s, rtol=1e-4)


def test_a_per_token_term_that_only_fits_noise_is_dropped():
    """Training time that does not follow the tokens, measured with noise over runs of
    different lengths: the per-token term does not beat the simpler form by a standard error
    on held-out runs, so it is dropped."""
    true = TRUE.with_overrides({"train": {"s_per_token_one_gpu": 0.0}})
    gpus = np.repeat([6, 4, 2], 10)
    runs = [
        trace_from_costs(
            lognormal_workload(30, 48, seed=s, growth=g),
            costs=true,
            model=MODEL,
            train_gpus=gpus,
            noise=0.05,
        )
        # seeds where the term's mean held-out error is a little lower, by less than its
        # standard error: a plain comparison of means would keep it
        for s, g in ((60, 1.0), (61, 1.5), (62, 2.0), (63, 1.2))
    ]
    fit = fit_costs(runs, model=MODEL, sync_bandwidth_gbps=400.0)
    assert fit.costs.train.s_per_token_one_gpu == 0.0
    assert any("per-token cost dropped" in a for a in fit.stage("train").assumptions)


def test_the_first_step_is_the_lowest_step_number_of_each_trace(workload):
    """Logs that count steps from 1 (verl) still have their first step taken as the warm-up."""
    true = TRUE.with_overrides({"train": {"first_step_warmup_s": 4.0}})
    trace = trace_from_costs(workload, costs=true, model=MODEL, train_gpus=np.repeat([6, 4, 2], 30))
    trace.steps["step"] += 1
    trace.samples["step"] += 1
    fit = fit_costs([trace], model=MODEL, sync_bandwidth_gbps=400.0)
    assert fit.costs.train.first_step_warmup_s == pytest.approx(4.0, rel=1e-4)


def test_one_replica_count_holds_contention(workload):
    trace = trace_from_costs(workload, costs=TRUE, model=MODEL, train_gpus=6)
    base = CostModels().with_overrides({"rollout": {"replica_contention_per_extra": 0.2}})
    fit = fit_costs([trace], base=base, model=MODEL, sync_bandwidth_gbps=400.0)
    assert fit.costs.rollout.replica_contention_per_extra == 0.2
    assert any(
        "contention between replicas held at 0.2" in a for a in fit.stage("rollout").assumptions
    )


def test_noisy_trace_reports_quality(workload):
    trace = trace_from_costs(workload, costs=TRUE, model=MODEL, train_gpus=6, noise=0.05)
    fit = fit_costs([trace], model=MODEL, sync_bandwidth_gbps=400.0)
    rollout = fit.stage("rollout")
    assert 0.5 < rollout.r2 < 1.0
    assert rollout.rmse_s > 0
    assert len(rollout.residuals_s) == workload.num_steps - 1  # the first step is warm-up
    assert fit.costs.rollout.decode_base_s_per_iter == pytest.approx(0.021, rel=0.15)


def test_traces_of_another_model_are_left_out_of_the_stage_fits(workload):
    """Stage costs belong to one model: a trace of another size (given for its resizes) must not
    bend them, and the notes say it was left out; no trace of the model is a clear error."""
    trace = trace_from_costs(workload, costs=TRUE, model=MODEL, train_gpus=6)
    other_model = ModelConfig(num_params_b=1.5)
    slower = TRUE.with_overrides({"rollout": {"decode_base_s_per_iter": 0.09}})
    other = trace_from_costs(workload, costs=slower, model=other_model, train_gpus=6)
    fit = fit_costs([other, trace], model=MODEL, sync_bandwidth_gbps=400.0)
    assert fit.costs.rollout.decode_base_s_per_iter == pytest.approx(0.021, rel=1e-4)
    assert any("trace 1" in n and "1.5B model, not 8B" in n for n in fit.notes)
    third = trace_from_costs(
        workload, costs=TRUE, model=ModelConfig(num_params_b=3.0), train_gpus=6
    )
    with pytest.raises(FitError, match="no trace is of the 8B model"):
        fit_costs([other, third], model=MODEL, sync_bandwidth_gbps=400.0)
    alone = fit_costs([other], model=MODEL, sync_bandwidth_gbps=400.0)
    assert any("fitted as the configured 8B model's" in n for n in alone.notes)


def test_too_few_steps_is_a_clear_error():
    small = lognormal_workload(2, 8)
    trace = trace_from_costs(small, costs=TRUE, model=MODEL, train_gpus=6)
    with pytest.raises(FitError, match="at least 3"):
        fit_costs([trace], model=MODEL, sync_bandwidth_gbps=400.0)


def _cli():
    app = typer.Typer(pretty_exceptions_enable=False)
    calibrate_command.register(app)
    app.command("noop")(lambda: None)  # keeps `calibrate` a subcommand of a multi-command app
    return app


def test_calibrate_writes_costs_that_load(tmp_path, workload):
    path = tmp_path / "trace"
    write_trace(path, trace_from_costs(workload, costs=TRUE, model=MODEL, train_gpus=6))
    out = tmp_path / "costs.yaml"
    result = CliRunner().invoke(_cli(), ["calibrate", "--trace", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "rollout: R²=1.000" in result.output
    assert "scaling efficiency held at" in result.output
    costs = load_costs(out)
    assert costs.cost_source.value == "calibrated"
    assert costs.rollout.decode_base_s_per_iter == pytest.approx(0.021, rel=1e-4)


def test_calibrate_bad_input_exits_2_without_output(tmp_path):
    out = tmp_path / "costs.yaml"
    result = CliRunner().invoke(
        _cli(), ["calibrate", "--trace", str(tmp_path / "missing.jsonl"), "--out", str(out)]
    )
    assert result.exit_code == 2
    assert "error:" in result.output and "Traceback" not in result.output
    assert not out.exists()
