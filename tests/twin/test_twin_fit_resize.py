"""Resize-phase calibration recovers known parameters from twin-generated traces with noise, and
refuses what the records cannot determine."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from analysis_traces import with_phase_updates
from twin_scenarios import shipped_scenario

from dynaresize.traces.io import Trace
from dynaresize.traces.phases import PhaseName, StrategyName
from dynaresize.traces.schema import RunMeta
from dynaresize.twin.calibration import FitError, fit_resize_phases
from dynaresize.twin.calibration.phase_fit import ParamStatus
from dynaresize.twin.costs.memory import ModelConfig
from dynaresize.twin.costs.resize import (
    MoveDirection,
    MovedShare,
    ResizeCostParams,
    StateMoved,
    plan_resize,
)
from dynaresize.twin.costs.resize_strategies import STRATEGY_COSTS
from dynaresize.twin.simulation import simulate

SCHEDULE = [
    {"step": 3, "allocation": "4:4"},
    {"step": 8, "allocation": "6:2"},
    {"step": 13, "allocation": "4:4"},
]
RECUT_MASTER_WEIGHTS = {"moves": StateMoved.MASTER_WEIGHTS, "share": MovedShare.CHANGED_OWNER}
"""A weight restore that moves the changed-owner share of the fp32 master copy."""
HOST_GBPS, LINK_GBPS = 20.0, 300.0  # not the reference bandwidths: the conversion is exercised


# The strategies with a phase table of their own (host_sync is derived from overlapped's).
TABLED_STRATEGIES = tuple(s for s, costs in STRATEGY_COSTS.items() if costs.fitted)


def true_params() -> ResizeCostParams:
    """The defaults with every phase's numbers changed, so recovery cannot be a coincidence."""
    base = ResizeCostParams()
    changed = {}
    for strategy in TABLED_STRATEGIES:
        phases = {}
        for i, (name, spec) in enumerate(base.phases(strategy).items()):
            rate = 0.0 if spec.moves is StateMoved.NONE else 0.35 + 0.2 * i
            phases[name] = spec.model_copy(update={"base_s": 3.0 + 2.5 * i, "s_per_gb": rate})
        changed[STRATEGY_COSTS[strategy].table] = phases
    return base.model_copy(update=changed)


def twin_trace(
    size_b: float,
    strategy: StrategyName,
    rng: np.random.Generator,
    noise: float = 0.02,
    params: ResizeCostParams | None = None,
    schedule: list[dict] | None = None,
) -> Trace:
    scenario = shipped_scenario("example")
    cluster = scenario.cluster.model_copy(
        update={"host_bandwidth_gbps": HOST_GBPS, "intra_node_bandwidth_gbps": LINK_GBPS}
    )
    scenario = scenario.model_copy(
        update={
            "cluster": cluster,
            "model": scenario.model.model_copy(update={"num_params_b": size_b}),
            "costs": scenario.costs.model_copy(update={"resize": params or true_params()}),
            "pipeline": scenario.pipeline.model_copy(update={"resize_strategy": strategy}),
            "simulation": scenario.simulation.model_copy(update={"num_steps": 18}),
        }
    )
    result = simulate(scenario, {"kind": "scheduled", "schedule": schedule or SCHEDULE})
    resizes = result.resizes.copy()
    duration = (resizes["end_s"] - resizes["start_s"]) * (1 + rng.normal(0, noise, len(resizes)))
    resizes["end_s"] = resizes["start_s"] + np.maximum(duration, 0.0)
    meta = RunMeta(source="twin", model_params_b=size_b)
    return Trace(meta=meta, steps=result.steps, resizes=resizes).validated()


def fit(traces, **kw):
    return fit_resize_phases(
        traces,
        model=ModelConfig(num_params_b=8.2),
        host_bandwidth_gbps=HOST_GBPS,
        interconnect_bandwidth_gbps=LINK_GBPS,
        **kw,
    )


@pytest.fixture(scope="module")
def three_sizes():
    rng = np.random.default_rng(3)
    return [twin_trace(s, strat, rng) for s in (1.5, 4.0, 8.2) for strat in TABLED_STRATEGIES]


def test_recovers_known_phase_parameters(three_sizes):
    result = fit(three_sizes)
    truth = true_params()
    assert {(p.strategy, p.phase) for p in result.phases} == {
        (s, n) for s in TABLED_STRATEGIES for n in truth.phases(s)
    }
    for phase_fit in result.phases:
        want = truth.phases(phase_fit.strategy)[phase_fit.phase]
        fitted = result.params.phases(phase_fit.strategy)[phase_fit.phase]
        # Three resizes in each of three traces; engines start in the two that grow rollout.
        gaining_only = phase_fit.phase is PhaseName.ROLLOUT_REINIT
        assert phase_fit.num_records == (6 if gaining_only else 9)
        if want.moves is StateMoved.NONE:
            assert phase_fit.rate_status is ParamStatus.NOT_APPLICABLE
            assert fitted.base_s == pytest.approx(want.base_s, rel=0.03)
        else:
            assert phase_fit.rate_status is ParamStatus.FITTED
            assert fitted.s_per_gb == pytest.approx(want.s_per_gb, rel=0.1)
            assert fitted.base_s == pytest.approx(want.base_s, abs=0.1 * want.base_s + 1.0)
            assert phase_fit.r2 is not None and phase_fit.r2 > 0.95
            assert phase_fit.rate_stderr_s_per_gb is not None
        # structure of the DAG is kept
        assert fitted.depends_on == want.depends_on and fitted.critical == want.critical
    check = result.critical_path
    assert check is not None and len(check.measured_s) == 18
    assert np.median(check.abs_pct_error) < 3.0
    assert result.undetermined() == []
    assert any("critical path" in line for line in result.report_lines())


def test_noise_free_recovery_is_exact():
    rng = np.random.default_rng(0)
    traces = [twin_trace(s, StrategyName.OVERLAPPED, rng, noise=0.0) for s in (2.0, 8.2)]
    result = fit(traces)
    truth = true_params().overlapped
    for phase_fit in result.phases:
        fitted = result.params.overlapped[phase_fit.phase]
        assert fitted.base_s == pytest.approx(truth[phase_fit.phase].base_s, rel=1e-6, abs=1e-6)
        assert fitted.s_per_gb == pytest.approx(truth[phase_fit.phase].s_per_gb, rel=1e-6)
    np.testing.assert_allclose(result.critical_path.abs_pct_error, 0.0, atol=1e-6)


def test_one_model_size_holds_the_rate_and_says_why():
    rng = np.random.default_rng(1)
    result = fit([twin_trace(8.2, StrategyName.OVERLAPPED, rng)])
    held = {p.phase for p in result.phases if p.rate_status is ParamStatus.HELD}
    assert PhaseName.STATE_EXPORT in held and PhaseName.WEIGHT_SYNC in held
    export = next(p for p in result.phases if p.phase is PhaseName.STATE_EXPORT)
    assert "cannot be determined" in export.reasons[0] and "same" in export.reasons[0]
    # the held rate is the configured one, so base_s absorbs the rest: totals still match
    assert result.params.overlapped[PhaseName.STATE_EXPORT].s_per_gb == pytest.approx(
        ResizeCostParams().overlapped[PhaseName.STATE_EXPORT].s_per_gb
    )
    assert abs(np.mean(export.residuals_s)) < 1e-6
    with pytest.raises(
        FitError, match=r"overlapped\.state_export\.s_per_gb \(every record moved the same 115 GB\)"
    ):
        fit([twin_trace(8.2, StrategyName.OVERLAPPED, rng)], require_determined=True)


def test_a_held_rate_above_the_measured_times_is_lowered_to_them():
    """A configured rate that alone exceeds what a phase took is bounded by the records: the
    rate becomes the measured seconds per GB and base_s 0, so the phase is not over-predicted."""
    rng = np.random.default_rng(5)
    trace = twin_trace(8.2, StrategyName.OVERLAPPED, rng, noise=0.0)
    export = trace.resizes["phase"] == PhaseName.STATE_EXPORT.value
    gb = trace.resizes.loc[export, "bytes_moved"].to_numpy(float) / 1e9
    # every export took 1 ms per GB: far below base_s plus the configured rate
    trace.resizes.loc[export, "end_s"] = trace.resizes.loc[export, "start_s"] + 1e-3 * gb
    result = fit([trace])
    phase = next(p for p in result.phases if p.phase is PhaseName.STATE_EXPORT)
    assert phase.rate_status is ParamStatus.LOWERED
    assert phase.base_s == 0.0
    assert phase.s_per_gb_measured == pytest.approx(1e-3, rel=1e-6)
    np.testing.assert_allclose(phase.residuals_s, 0.0, atol=1e-9)
    assert [r for r in phase.reasons if "lowered to the measured" in r] == phase.reasons
    assert any("state_export.s_per_gb" in u for u in result.undetermined())


def test_coordination_outside_the_phases_is_recovered():
    """The stall the steps show beyond the recorded phases becomes coordination_s, which every
    planned resize adds to its critical path."""
    rng = np.random.default_rng(6)
    truth = true_params().model_copy(update={"coordination_s": 0.7})
    traces = [twin_trace(s, StrategyName.OVERLAPPED, rng, 0.0, truth) for s in (2.0, 8.2)]
    result = fit(traces)
    assert result.params.coordination_s == pytest.approx(0.7, rel=1e-6)
    np.testing.assert_allclose(result.critical_path.abs_pct_error, 0.0, atol=1e-6)
    assert any("coordination" in n for n in result.notes)


def test_a_phase_always_in_the_background_leaves_the_critical_chain():
    """weight_restore is critical in the configured DAG; records that always ran it in the
    background move it there, and the critical phase that waited for it waits for its own
    dependency instead, so the planned critical path shrinks."""
    rng = np.random.default_rng(7)
    traces = [twin_trace(s, StrategyName.OVERLAPPED, rng, 0.0) for s in (2.0, 8.2)]
    for t in traces:
        restore = t.resizes["phase"] == PhaseName.WEIGHT_RESTORE.value
        t.resizes.loc[restore, "critical"] = False
    result = fit(traces)
    table = result.params.overlapped
    assert table[PhaseName.WEIGHT_RESTORE].critical is False
    assert table[PhaseName.ROLLOUT_REINIT].depends_on == [PhaseName.WORKER_REINIT]
    assert any("no longer wait for it" in n for n in result.notes)


def test_a_phase_always_on_the_critical_path_joins_the_chain():
    """comm_prewarm is in the background of the configured DAG; records that always ran it on
    the critical path, right after rollout_reinit, put it there, after rollout_reinit."""
    rng = np.random.default_rng(8)
    traces = [twin_trace(s, StrategyName.OVERLAPPED, rng, 0.0) for s in (2.0, 8.2)]
    for t in traces:
        r = t.resizes
        for resize_id, group in r.groupby("resize_id"):
            reinit = group[group["phase"] == PhaseName.ROLLOUT_REINIT.value]
            prewarm = (r["resize_id"] == resize_id) & (r["phase"] == PhaseName.COMM_PREWARM.value)
            length = (r.loc[prewarm, "end_s"] - r.loc[prewarm, "start_s"]).to_numpy()
            r.loc[prewarm, "start_s"] = float(reinit["end_s"].iloc[0])
            r.loc[prewarm, "end_s"] = float(reinit["end_s"].iloc[0]) + length
            r.loc[prewarm, "critical"] = True
    result = fit(traces)
    prewarm = result.params.overlapped[PhaseName.COMM_PREWARM]
    assert prewarm.critical is True
    assert prewarm.depends_on == [PhaseName.ROLLOUT_REINIT]
    assert any("placed there, after rollout_reinit" in n for n in result.notes)


def test_no_resize_records_is_refused():
    rng = np.random.default_rng(2)
    trace = twin_trace(4.0, StrategyName.OVERLAPPED, rng)
    trace.resizes = trace.resizes.iloc[0:0]
    with pytest.raises(FitError, match="no resize records"):
        fit([trace])


def test_missing_bytes_use_the_model_state_size_and_unknown_phases_are_reported():
    rng = np.random.default_rng(4)
    traces = [twin_trace(s, StrategyName.STOP_AND_REBUILD, rng, noise=0.0) for s in (2.0, 8.2)]
    for t in traces:
        t.resizes["bytes_moved"] = 0
        t.resizes.loc[t.resizes["phase"] == "postprocess", "phase"] = "rollout_drain"
        t.resizes.loc[t.resizes["phase"] == "comm_prewarm", "critical"] = False
    result = fit(traces)
    truth = true_params().stop_and_rebuild
    fitted = result.params.stop_and_rebuild[PhaseName.WEIGHT_RESTORE]
    assert fitted.s_per_gb == pytest.approx(truth[PhaseName.WEIGHT_RESTORE].s_per_gb, rel=1e-6)
    assert any("no bytes recorded" in n for n in result.notes)
    assert any("rollout_drain was measured" in n for n in result.notes)
    assert any("comm_prewarm ran in the background" in n for n in result.notes)
    # The strategy was measured and never ran postprocess: it costs nothing in the fitted model.
    never_run = result.params.stop_and_rebuild[PhaseName.POSTPROCESS]
    assert (never_run.base_s, never_run.s_per_gb, never_run.moves) == (0.0, 0.0, StateMoved.NONE)
    assert any("postprocess: in the configured DAG but never run" in n for n in result.notes)


def measured_cluster_config(tmp_path) -> str:
    """The example scenario on the links the traces were generated with, as a YAML file."""
    import yaml

    scenario = shipped_scenario("example")
    cluster = scenario.cluster.model_copy(
        update={"host_bandwidth_gbps": HOST_GBPS, "intra_node_bandwidth_gbps": LINK_GBPS}
    )
    path = tmp_path / "measured.yaml"
    data = scenario.model_copy(update={"cluster": cluster}).model_dump(mode="json")
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_calibrate_command_writes_fitted_resize_phases(tmp_path, three_sizes):
    import yaml
    from typer.testing import CliRunner

    from dynaresize.cli import app
    from dynaresize.traces.io import write_trace

    config = measured_cluster_config(tmp_path)
    paths = []
    for i, trace in enumerate(three_sizes[::2]):  # stop-and-rebuild, one trace per model size
        write_trace(tmp_path / f"t{i}", trace)
        paths += ["--trace", str(tmp_path / f"t{i}")]
    out = tmp_path / "costs.yaml"
    runner = CliRunner()
    result = runner.invoke(app, ["calibrate", *paths, "--config", config, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "resize critical path: median |error|" in result.output
    assert "# resize stop_and_rebuild.state_export: base_s" in out.read_text()  # provenance
    written = yaml.safe_load(out.read_text())["resize"]["stop_and_rebuild"]
    truth = true_params().stop_and_rebuild
    for phase in (PhaseName.STATE_EXPORT, PhaseName.WEIGHT_RESTORE):
        assert written[phase.value]["s_per_gb"] == pytest.approx(truth[phase].s_per_gb, rel=0.1)

    assert "1.5B model, not 8.2B: left out of the stage-cost fits" in out.read_text()

    refused = tmp_path / "refused.yaml"
    args = ["calibrate", *paths[-2:], "--config", config, "--out", str(refused)]  # 8.2B alone
    result = runner.invoke(app, [*args, "--require-resize-fit"])
    assert result.exit_code == 2
    assert "cannot determine" in result.output and not refused.exists()


def test_recorded_bytes_and_directions_shape_the_phases_they_came_from():
    """Records whose bytes are the changed-owner share of the master weights, and a set-up phase
    that ran only on moves towards training, are fitted as such from a configuration that says
    otherwise (whole weights, every move): the fitted plans then predict every move exactly."""
    truth = with_phase_updates(
        true_params(),
        StrategyName.OVERLAPPED,
        {
            PhaseName.WEIGHT_RESTORE: RECUT_MASTER_WEIGHTS,
            PhaseName.WORKER_REINIT: {"on_moves": MoveDirection.GAINING_TRAINING},
        },
    )
    table = truth.overlapped
    rng = np.random.default_rng(11)
    traces = [twin_trace(s, StrategyName.OVERLAPPED, rng, 0.0, truth) for s in (2.0, 8.2)]
    result = fit(traces)
    fitted = result.params.overlapped
    restore = fitted[PhaseName.WEIGHT_RESTORE]
    assert (restore.moves, restore.share) == (StateMoved.MASTER_WEIGHTS, MovedShare.CHANGED_OWNER)
    assert restore.s_per_gb == pytest.approx(table[PhaseName.WEIGHT_RESTORE].s_per_gb, rel=1e-6)
    reinit = fitted[PhaseName.WORKER_REINIT]
    assert reinit.on_moves is MoveDirection.GAINING_TRAINING
    assert reinit.base_s == pytest.approx(table[PhaseName.WORKER_REINIT].base_s, rel=1e-6)
    np.testing.assert_allclose(result.critical_path.abs_pct_error, 0.0, atol=1e-6)
    assert any("adopted" in n for n in result.notes)
    assert any("gaining_training moves only" in n for n in result.notes)


def test_a_phase_that_moved_nothing_where_others_record_bytes_is_fitted_as_moving_nothing():
    """An export the executor does without moving bytes (the state moves in the restore phases)
    records 0 bytes beside phases that record theirs: a measured zero. The fit must not price the
    configured state's bytes there (their link floor alone would add a whole transfer to the
    critical path), so the fitted plans predict every move exactly."""
    nothing = {"moves": StateMoved.NONE}
    truth = with_phase_updates(
        true_params(),
        StrategyName.OVERLAPPED,
        {PhaseName.STATE_EXPORT: nothing, PhaseName.WEIGHT_RESTORE: RECUT_MASTER_WEIGHTS},
    )
    configured = ResizeCostParams().overlapped[PhaseName.STATE_EXPORT]
    assert configured.moves is not StateMoved.NONE and configured.critical
    rng = np.random.default_rng(12)
    traces = [twin_trace(s, StrategyName.OVERLAPPED, rng, 0.0, truth) for s in (2.0, 8.2)]
    export = pd.concat([t.resizes for t in traces])
    export = export[export["phase"] == PhaseName.STATE_EXPORT.value]
    assert len(export) and (export["bytes_moved"] == 0).all()
    result = fit(traces)
    fitted = result.params.overlapped[PhaseName.STATE_EXPORT]
    assert fitted.moves is StateMoved.NONE
    assert fitted.base_s == pytest.approx(truth.overlapped[PhaseName.STATE_EXPORT].base_s)
    np.testing.assert_allclose(result.critical_path.abs_pct_error, 0.0, atol=1e-6)
    assert any("adopted as moving nothing" in n for n in result.notes)
    # Without any recorded bytes in the traces a zero is a missing count: the state is assumed.
    for t in traces:
        t.resizes["bytes_moved"] = 0
    assert fit(traces).params.overlapped[PhaseName.STATE_EXPORT].moves is configured.moves


def test_bytes_that_several_readings_explain_keep_the_configured_one():
    """One-notch moves re-cut half the state, so half the fp32 master copy is as many bytes as
    the whole bf16 weights: records of such moves alone cannot tell, and the configured reading
    stays, with a note."""
    truth = with_phase_updates(
        true_params(), StrategyName.OVERLAPPED, {PhaseName.WEIGHT_RESTORE: RECUT_MASTER_WEIGHTS}
    )
    one_notch = [
        {"step": 3, "allocation": "5:3"},
        {"step": 8, "allocation": "6:2"},
        {"step": 13, "allocation": "5:3"},
    ]
    rng = np.random.default_rng(13)
    traces = [
        twin_trace(s, StrategyName.OVERLAPPED, rng, 0.0, truth, schedule=one_notch)
        for s in (2.0, 8.2)
    ]
    result = fit(traces)
    restore = result.params.overlapped[PhaseName.WEIGHT_RESTORE]
    assert (restore.moves, restore.share) == (StateMoved.WEIGHTS, MovedShare.WHOLE)
    assert any("fit several readings" in n and "weight_restore" in n for n in result.notes)


def test_a_background_phase_holding_the_pipeline_a_moment_counts_as_coordination():
    """A deferred phase that the model places in the background but whose set-up held the
    pipeline for 0.2 s (recorded as a critical part of it) leaves that time in coordination_s,
    where the twin charges it, instead of shortening the stall outside the phases."""
    truth = true_params().model_copy(update={"coordination_s": 0.7})
    rng = np.random.default_rng(12)
    traces = [twin_trace(s, StrategyName.OVERLAPPED, rng, 0.0, truth) for s in (2.0, 8.2)]
    for t in traces:
        held = []
        for _, resize in t.resizes.groupby("resize_id"):
            end_s = resize.loc[resize["critical"].astype(bool), "end_s"].max()
            row = resize[resize["phase"] == PhaseName.OPTIMIZER_RESTORE.value].iloc[0].copy()
            row["critical"], row["bytes_moved"] = True, 0
            row["start_s"], row["end_s"] = end_s, end_s + 0.2
            held.append(row)
        t.resizes = pd.concat([t.resizes, pd.DataFrame(held)], ignore_index=True)
    result = fit(traces)
    assert result.params.overlapped[PhaseName.OPTIMIZER_RESTORE].critical is False
    assert result.params.coordination_s == pytest.approx(0.7, rel=1e-6)
    np.testing.assert_allclose(result.critical_path.abs_pct_error, 0.0, atol=1e-6)


def test_a_measured_phase_the_dag_lacks_is_added_where_its_records_place_it():
    """rollout_release (a live run's engine release) is in no configured table: records of it on
    the critical path, after worker_reinit, costing time only on moves gaining training, make
    it a fitted phase there."""
    rng = np.random.default_rng(9)
    traces = [twin_trace(s, StrategyName.OVERLAPPED, rng, 0.0) for s in (2.0, 8.2)]
    for t in traces:
        r = t.resizes
        rows = []
        for _, group in r.groupby("resize_id"):
            after = group[group["phase"] == PhaseName.WORKER_REINIT.value].iloc[0]
            row = after.copy()
            gaining_training = int(after.to_allocation.split(":")[0]) > int(
                after.from_allocation.split(":")[0]
            )
            row["phase"] = PhaseName.ROLLOUT_RELEASE.value
            row["start_s"] = after.end_s
            row["end_s"] = after.end_s + (1.5 if gaining_training else 0.0)
            row["bytes_moved"] = 0
            rows.append(row)
        t.resizes = pd.concat([r, pd.DataFrame(rows)], ignore_index=True)
    assert ResizeCostParams().overlapped.get(PhaseName.ROLLOUT_RELEASE) is None
    result = fit(traces)
    release = result.params.overlapped[PhaseName.ROLLOUT_RELEASE]
    assert release.critical and release.depends_on == [PhaseName.WORKER_REINIT]
    assert release.on_moves is MoveDirection.GAINING_TRAINING
    assert release.base_s == pytest.approx(1.5, rel=1e-6)
    assert any("rollout_release was measured" in n for n in result.notes)
    # the twin's cost model reads the fitted table back and prices the phase on such moves
    params = ResizeCostParams.model_validate(result.params.model_dump(mode="json"))
    plans = {
        gains: plan_resize(
            strategy=StrategyName.OVERLAPPED,
            model=ModelConfig(num_params_b=8.2),
            params=params,
            host_bandwidth_gbps=HOST_GBPS,
            interconnect_bandwidth_gbps=LINK_GBPS,
            starts_rollout_engines=gains,
        )
        for gains in (True, False)
    }
    seconds = {
        gains: {p.name: p.duration_s for p in plan.phases}[PhaseName.ROLLOUT_RELEASE]
        for gains, plan in plans.items()
    }
    assert seconds[False] == pytest.approx(1.5) and seconds[True] == 0.0
