"""Per-path pricing of a re-cut: the shares by path add up to what changes owner, a model without
per-path bandwidths (or on one node) gives exactly today's figures, a cross-node piece costs its
path's difference in seconds per GB, and calibrate fits each path's bandwidth from the
executor's transfer records."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twin_scenarios import shipped_scenario

from dynaresize.traces.io import Trace
from dynaresize.traces.phases import PhaseName, StrategyName, TransferPath
from dynaresize.traces.schema import RunMeta
from dynaresize.traces.transfers import TransferRecord, to_extra, transfers_frame
from dynaresize.twin.calibration import fit_resize_phases
from dynaresize.twin.calibration.fit_paths import fit_path_bandwidths
from dynaresize.twin.costs.memory import GB, ModelConfig
from dynaresize.twin.costs.resize import (
    MovedShare,
    ResizeCostParams,
    StateMoved,
    changed_owner_fraction,
    plan_resize,
)
from dynaresize.twin.costs.transfer_paths import PathBandwidths, recut_shares_by_path
from dynaresize.twin.simulation import simulate

MODEL = ModelConfig(num_params_b=8.2)
SHM_GBPS, NETWORK_GBPS = 20.0, 5.0


def recut_params(**update) -> ResizeCostParams:
    """Overlapped defaults whose weight restore re-cuts the master weights (as live runs fit)."""
    base = ResizeCostParams()
    table = dict(base.overlapped)
    table[PhaseName.WEIGHT_RESTORE] = table[PhaseName.WEIGHT_RESTORE].model_copy(
        update={"moves": StateMoved.MASTER_WEIGHTS, "share": MovedShare.CHANGED_OWNER}
    )
    return base.model_copy(update={"overlapped": table, **update})


def plan(params: ResizeCostParams, before: int, after: int, per_node: int | None):
    return plan_resize(
        strategy=StrategyName.OVERLAPPED,
        model=MODEL,
        params=params,
        host_bandwidth_gbps=25.0,
        interconnect_bandwidth_gbps=400.0,
        trainers_before=before,
        trainers_after=after,
        workers_per_node=per_node,
    )


@settings(max_examples=200, deadline=None)
@given(
    before=st.integers(1, 16),
    after=st.integers(1, 16),
    per_node=st.one_of(st.none(), st.integers(1, 8)),
)
def test_the_shares_by_path_add_up_to_the_changed_owner_fraction(before, after, per_node) -> None:
    shares = recut_shares_by_path(before, after, workers_per_node=per_node)
    assert math.isclose(sum(shares.values()), changed_owner_fraction(before, after), abs_tol=1e-12)
    if per_node is None or per_node >= max(before, after):
        assert shares[TransferPath.NETWORK] == 0.0  # every worker on one node


def test_two_to_three_trainers_on_nodes_of_two_cross_a_third_of_the_state() -> None:
    # old: worker 0 [0, 1/2), worker 1 [1/2, 1); new: 0 [0, 1/3), 1 [1/3, 2/3), 2 [2/3, 1)
    shares = recut_shares_by_path(2, 3, workers_per_node=2)
    assert shares[TransferPath.SHM] == pytest.approx(1 / 6)  # worker 0 -> 1, one node
    assert shares[TransferPath.NETWORK] == pytest.approx(1 / 3)  # worker 1 -> 2, across


@pytest.mark.parametrize("before, after", [(2, 3), (3, 2), (1, 3), (3, 1), (2, 2)])
def test_without_path_bandwidths_or_on_one_node_the_figures_are_unchanged(before, after) -> None:
    today = plan(recut_params(), before, after, None)
    bandwidths = PathBandwidths(shm_gbps=SHM_GBPS, network_gbps=NETWORK_GBPS)
    for per_node, params in [
        (2, recut_params()),  # nodes given, no per-path bandwidths
        (8, recut_params(path_bandwidths=bandwidths)),  # bandwidths, one node
        (None, recut_params(path_bandwidths=bandwidths)),
    ]:
        assert plan(params, before, after, per_node) == today
    # the default tables have no re-cut phase: nodes and bandwidths change nothing there
    default = ResizeCostParams(path_bandwidths=bandwidths)
    assert plan(default, before, after, 1) == plan(ResizeCostParams(), before, after, None)


def test_a_cross_node_piece_costs_its_paths_difference_in_seconds_per_gb() -> None:
    bandwidths = PathBandwidths(shm_gbps=SHM_GBPS, network_gbps=NETWORK_GBPS)
    one_node = plan(recut_params(path_bandwidths=bandwidths), 2, 3, 8)
    two_nodes = plan(recut_params(path_bandwidths=bandwidths), 2, 3, 2)
    master_gb = MODEL.num_params * MODEL.master_bytes_per_param / GB
    extra = master_gb / 3 * (1 / NETWORK_GBPS - 1 / SHM_GBPS)
    by_name = {p.name: p for p in two_nodes.phases}
    base = {p.name: p for p in one_node.phases}
    weight_restore = PhaseName.WEIGHT_RESTORE
    assert by_name[weight_restore].duration_s == pytest.approx(
        base[weight_restore].duration_s + extra
    )
    assert two_nodes.critical_s == pytest.approx(one_node.critical_s + extra)
    # a network faster than shared memory would shorten it, never below zero
    fast = PathBandwidths(shm_gbps=SHM_GBPS, network_gbps=1e6)
    assert plan(recut_params(path_bandwidths=fast), 2, 3, 2).critical_s <= one_node.critical_s


def test_same_node_path_cannot_be_the_network() -> None:
    with pytest.raises(ValueError, match="same_node_path"):
        PathBandwidths(same_node_path=TransferPath.NETWORK)


# --- calibration --------------------------------------------------------------------------


def transfer(path: TransferPath, num_bytes: int, seconds: float, resize_id: int = 0):
    cross = path is TransferPath.NETWORK
    return TransferRecord(
        resize_id=resize_id,
        phase=PhaseName.WEIGHT_RESTORE,
        path=path,
        src_worker=1,
        dst_worker=2 if cross else 0,
        src_node="a",
        dst_node="b" if cross else "a",
        num_bytes=num_bytes,
        seconds=seconds,
    )


def trace_with_transfers(
    records: list[TransferRecord], params: ResizeCostParams | None = None
) -> Trace:
    """A twin run of the example scenario with resizes, and the given transfer records."""
    scenario = shipped_scenario("example")
    update: dict = {"simulation": scenario.simulation.model_copy(update={"num_steps": 10})}
    if params is not None:
        update["costs"] = scenario.costs.model_copy(update={"resize": params})
    scenario = scenario.model_copy(update=update)
    schedule = [{"step": 3, "allocation": "4:4"}, {"step": 6, "allocation": "6:2"}]
    result = simulate(scenario, {"kind": "scheduled", "schedule": schedule})
    extras = [to_extra(r, step=3).model_dump() for r in records]
    meta = RunMeta(source="twin", model_params_b=scenario.model.num_params_b)
    return Trace(
        meta=meta, steps=result.steps, resizes=result.resizes, extras=pd.DataFrame(extras)
    ).validated()


def test_calibrate_fits_each_paths_bandwidth_from_the_transfer_records() -> None:
    rng = np.random.default_rng(0)
    records = []
    for path, gbps in ((TransferPath.SHM, SHM_GBPS), (TransferPath.NETWORK, NETWORK_GBPS)):
        for size in rng.integers(10**6, 10**8, 6):
            records.append(transfer(path, int(size), float(size) / 1e9 / gbps))
    trace = trace_with_transfers(records)
    assert len(transfers_frame(trace.extras)) == len(records)
    fitted = fit_path_bandwidths([trace])
    assert fitted is not None
    assert fitted.bandwidths.shm_gbps == pytest.approx(SHM_GBPS)
    assert fitted.bandwidths.network_gbps == pytest.approx(NETWORK_GBPS)
    assert fitted.bandwidths.device_gbps is None  # not measured: left unknown
    assert "12 transfer records" in fitted.bandwidths.source
    # a path the records do not show keeps the base model's figure
    kept = fit_path_bandwidths([trace], base=PathBandwidths(device_gbps=300.0))
    assert kept is not None and kept.bandwidths.device_gbps == 300.0
    # through the resize fit, as `dynaresize calibrate` runs it
    fit = fit_resize_phases(
        [trace], model=MODEL, host_bandwidth_gbps=25.0, interconnect_bandwidth_gbps=400.0
    )
    assert fit.params.path_bandwidths == fitted.bandwidths
    assert any(line.startswith("resize: path network:") for line in fit.report_lines())


def test_traces_without_transfer_records_leave_the_model_without_path_bandwidths() -> None:
    trace = trace_with_transfers([])
    assert fit_path_bandwidths([trace]) is None
    fit = fit_resize_phases(
        [trace], model=MODEL, host_bandwidth_gbps=25.0, interconnect_bandwidth_gbps=400.0
    )
    assert fit.params.path_bandwidths is None


def test_a_multi_node_record_is_fitted_at_its_same_node_duration() -> None:
    """Weight-restore records whose half crossed nodes, and took that much longer, fit to the
    same phase rates as the single-node records they came from."""
    single = trace_with_transfers([], params=recut_params())
    resizes = single.resizes.copy()
    records, slower = [], []
    for row in resizes.itertuples():
        extra = 0.0
        if row.phase == PhaseName.WEIGHT_RESTORE.value and row.bytes_moved > 0:
            half = row.bytes_moved // 2
            records.append(transfer(TransferPath.SHM, half, half / 1e9 / SHM_GBPS, row.resize_id))
            records.append(
                transfer(TransferPath.NETWORK, half, half / 1e9 / NETWORK_GBPS, row.resize_id)
            )
            extra = half / 1e9 * (1 / NETWORK_GBPS - 1 / SHM_GBPS)
        slower.append(row.end_s + extra)
    assert records, "the run re-cut the weights"
    multi = trace_with_transfers(records, params=recut_params())
    multi.resizes["end_s"] = slower

    def weight_restore(trace: Trace):
        fit = fit_resize_phases(
            [trace], model=MODEL, host_bandwidth_gbps=25.0, interconnect_bandwidth_gbps=400.0
        )
        return fit.params.overlapped[PhaseName.WEIGHT_RESTORE]

    assert weight_restore(multi).base_s == pytest.approx(weight_restore(single).base_s, abs=1e-6)
    assert weight_restore(multi).s_per_gb == pytest.approx(weight_restore(single).s_per_gb)
