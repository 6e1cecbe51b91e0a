"""A live run on 4 CPU workers with resizes in both directions, checked from its records.

One run (module fixture) trains the tiny model for 6 steps while the `scheduled` policy moves a
rollout worker to Training after step 1 (2:2 -> 3:1) and two trainers to Rollout after step 3
(3:1 -> 1:3). A second session trains on the very same recorded batches without resizing; its
parameters must match, and its trainer state must survive a round trip over new rank counts
bit for bit.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from dynaresize.executor.config import LiveConfig
from dynaresize.executor.driver import LiveSession, run_live
from dynaresize.executor.roles import RoleMap
from dynaresize.executor.run_folder import checkpoint as ckpt
from dynaresize.executor.run_folder.lineage import LineageError, check_lineage
from dynaresize.executor.run_folder.records import LINEAGE_JSONL
from dynaresize.executor.testing.harness import live_session
from dynaresize.executor.worker.actor import LiveWorker
from dynaresize.executor.worker.shards import full_vectors
from dynaresize.policies.types import Allocation
from dynaresize.traces.io import read_trace
from dynaresize.traces.phases import PhaseName
from tests.state_bound import STATE_RELATIVE_ERROR_BOUND, relative_error

pytestmark = [pytest.mark.live, pytest.mark.timeout(900)]

SCHEDULE = "1@3:1;3@1:3"
HOST_SYNC_PHASES = {
    PhaseName.STATE_EXPORT,
    PhaseName.ROLLOUT_RELEASE,
    PhaseName.WORKER_REINIT,
    PhaseName.ROLLOUT_REINIT,
    PhaseName.COMM_PREWARM,
    PhaseName.WEIGHT_RESTORE,
    PhaseName.OPTIMIZER_RESTORE,
    PhaseName.WEIGHT_SYNC,
    PhaseName.POSTPROCESS,
}


def live_config(**overrides) -> LiveConfig:
    fields = {
        "model": {"preset": "tiny"},
        "num_workers": 4,
        "initial_allocation": "2:2",
        "candidate_allocations": ["3:1", "2:2", "1:3"],
        "num_steps": 6,
        "prompts_per_step": 4,
        "samples_per_prompt": 4,
        "max_response_tokens": 24,
        "micro_batch_samples": 8,
        "optimizer": {"lr": 1e-3},
        "policy": {"kind": "scheduled", "schedule": SCHEDULE},
        "checkpoint_every_steps": 6,
        "record_batches": True,
        "resize_strategy": "host_sync",
    }
    return LiveConfig.model_validate({**fields, **overrides})


def tiny_numel() -> int:
    from dynaresize.executor.rl.model import build_model
    from dynaresize.executor.rl.model_spec import ModelSpec

    return sum(p.numel() for p in build_model(ModelSpec(preset="tiny")).parameters())


@pytest.fixture(scope="module")
def resized_run(tmp_path_factory, _ray_started):
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1")
    config = live_config()
    out = tmp_path_factory.mktemp("resized")
    result = run_live(config, out_dir=out)
    return config, result, out


def test_the_run_resizes_in_both_directions_and_records_every_phase(resized_run) -> None:
    _, result, out = resized_run
    trace = read_trace(out / "trace")
    steps = trace.steps.sort_values("step")
    splits = [f"{t}:{r}" for t, r in zip(steps.train_gpus, steps.rollout_gpus, strict=True)]
    assert splits == ["2:2", "2:2", "3:1", "3:1", "1:3", "1:3"]
    assert result.num_resizes == 2 and result.final_allocation == Allocation.parse("1:3")
    roles = [list(r) for r in steps.device_roles]
    assert roles[2] == ["train", "train", "train", "rollout"]
    assert roles[4] == ["train", "rollout", "rollout", "rollout"]
    resizes = trace.resizes
    assert sorted(resizes.resize_id.unique()) == [0, 1]
    numel = tiny_numel()
    for resize_id, phases in resizes.groupby("resize_id"):
        assert {PhaseName(p) for p in phases.phase} == HOST_SYNC_PHASES
        assert phases.critical.all()
        # every phase lies in the gap between the two steps around the boundary
        before = steps[steps.step == phases.step.iloc[0]].iloc[0]
        after = steps[steps.step == phases.step.iloc[0] + 1].iloc[0]
        assert before.end_s <= phases.start_s.min() <= phases.end_s.max() <= after.start_s
        assert after.resize_id == resize_id
        by_phase = phases.set_index("phase")
        old_trainers = int(before.train_gpus)
        # fp32 master + two AdamW moments of every slice leave the old trainers
        assert by_phase.loc["state_export", "bytes_moved"] == 12 * numel
        assert by_phase.loc["weight_sync", "bytes_moved"] == 4 * numel
        assert old_trainers in (2, 3)
    decisions = trace.decisions
    # one decision per boundary between steps; none after the last step
    assert list(decisions.decision) == ["hold", "resize", "hold", "resize", "hold"]
    # the decision after the first measured resize says how far the policy's figure for it was
    first = decisions[decisions.resize_id == 0].iloc[0].predicted_resize_critical_s
    measured = json.loads((out / "resize_prior.json").read_text())["first_measured_critical_s"]
    ratio = decisions.prior_over_measured
    assert ratio.iloc[2] == pytest.approx(first / measured, rel=1e-6)
    assert ratio.drop(index=ratio.index[2]).isna().all()
    # release: auto (the default) kept the tiny model's engines, and the notes say why
    notes = trace.meta.notes
    assert "rollout_engine_release=keep" in notes
    assert any(n.startswith("rollout engines: resident (keep): ") for n in notes)


def test_every_step_trains_exactly_its_batch_and_no_sample_is_lost_or_reused(resized_run):
    config, _, out = resized_run
    summary = check_lineage(out, config)
    assert summary.num_samples == config.num_steps * config.samples_per_step
    # the worker that arrived trained, the trainers that left generated: roles really switched
    assert 2 in summary.devices_training
    assert 1 in summary.devices_generating


def test_the_lineage_check_catches_a_reused_and_a_lost_sample(resized_run, tmp_path) -> None:
    config, _, out = resized_run
    for damage in ("repeat", "lose"):
        copy = tmp_path / damage
        shutil.copytree(out, copy)
        lines = (copy / LINEAGE_JSONL).read_text().splitlines(keepends=True)
        lines = [*lines, lines[3]] if damage == "repeat" else lines[:7] + lines[8:]
        (copy / LINEAGE_JSONL).write_text("".join(lines))
        with pytest.raises(LineageError):
            check_lineage(copy, config)


def test_the_twin_replays_the_runs_own_records(resized_run, tmp_path) -> None:
    from dynaresize.twin.analysis.replay import RECORDED_MEASURED, RECORDED_PREDICTED, run_replay

    _, _, out = resized_run
    replay = run_replay(trace=out / "trace", policies=["static"], out_dir=tmp_path / "replay")
    table = replay.table
    rows = set(table[table.columns[0]])
    assert RECORDED_MEASURED in rows and RECORDED_PREDICTED in rows
    measured = read_trace(out / "trace").steps
    assert len(measured) == 6
    assert (tmp_path / "replay").is_dir()


@pytest.fixture(scope="module")
def replayed_session(resized_run, tmp_path_factory):
    """The same recorded batches trained on 2:2 without resizing, in sync mode; the session stays
    open."""
    _, _, resized_out = resized_run
    config = live_config(
        pipeline="sync",  # the training side sees the same batches in either mode
        policy={"kind": "static"},
        replay_batches_from=str(resized_out / "batches"),
        record_batches=False,
        checkpoint_every_steps=None,
    )
    out = tmp_path_factory.mktemp("static")
    with live_session(config, out) as session:
        session.run()
        yield config, session, out


def _trainer_state(session: LiveSession) -> dict[str, torch.Tensor]:
    rt = session.runtime
    shards = rt.call(rt.roles.trainer_ids, LiveWorker.export_shard).wait("test export")
    steps = {s.optimizer_step for s in shards.values()}
    assert len(steps) == 1
    return full_vectors(list(shards.values())) | {"step": torch.tensor(steps.pop())}


def test_the_same_batches_without_resizes_reach_the_same_parameters(resized_run, replayed_session):
    config, _, resized_out = resized_run
    _, session, _ = replayed_session
    resized = ckpt.load(resized_out).vectors
    static = _trainer_state(session)
    assert int(static["step"]) == config.num_steps
    for key in ("master", "exp_avg", "exp_avg_sq"):
        # Different data-parallel splits only reorder floating-point sums (docs/live-executor.md):
        # whole vectors within the rounding bound (an element-wise atol failed correct runs on
        # near-zero weights and let a zeroed exp_avg_sq through)
        error = relative_error(resized[key], static[key])
        assert error < STATE_RELATIVE_ERROR_BOUND, (key, error)
    # the parameters did move: the comparison is not between two untouched initialisations
    from dynaresize.executor.rl.model import build_model
    from dynaresize.executor.rl.model_spec import ModelSpec

    initial = torch.cat([p.detach().reshape(-1) for p in build_model(ModelSpec()).parameters()])
    assert (static["master"] - initial).abs().max() > 1e-3


def test_trainer_state_survives_new_rank_counts_and_back_bit_for_bit(replayed_session) -> None:
    _, session, _ = replayed_session
    rt = session.runtime
    before = _trainer_state(session)
    assert before["exp_avg_sq"].abs().sum() > 0  # real optimizer state, not zeros
    for label in ("3:1", "1:3", "2:2"):
        session.strategy.resize(rt, target=RoleMap.for_allocation(Allocation.parse(label)))
        assert rt.roles.allocation.label == label
        weights = rt.call(rt.all_ids, LiveWorker.flat_weights).wait("test weights")
        master = _trainer_state(session)["master"]
        for worker_id, flat in weights.items():  # trainers and replicas hold the master, bitwise
            assert torch.equal(flat, master), worker_id
    after = _trainer_state(session)
    for key, value in before.items():
        assert torch.equal(_bits(value), _bits(after[key])), key


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The raw bits, so that equal means bitwise equal (NaNs and signed zeros included)."""
    return tensor.reshape(-1).view(torch.int32) if tensor.dtype == torch.float32 else tensor


def test_records_are_readable_as_parquet_and_jsonl_alike(resized_run) -> None:
    _, _, out = resized_run
    parquet = read_trace(out / "trace")
    jsonl = read_trace(out / "trace.jsonl")
    pd.testing.assert_frame_equal(parquet.steps, jsonl.steps)
    assert len(parquet.samples) == 6 * 16
    # the built-in task's prompts name their source; they come from no dataset row
    assert set(parquet.samples["data_source"]) == {"repeat"}
    assert parquet.samples["extra_info_index"].isna().all()
    assert Path(out / "setup.json").is_file()


def test_weights_jsonl_counts_the_replicas_of_every_sync_by_path(resized_run) -> None:
    """On CPU every replica takes the network path; each version counts the replicas of the
    split it was synced on (2:2 at setup and after steps 0-1, 3:1 after 2-3, 1:3 after 4-5)."""
    _, _, out = resized_run
    lines = (out / "weights.jsonl").read_text().splitlines()
    published = [json.loads(line) for line in lines]
    assert [p["weights_version"] for p in published] == list(range(7))
    assert [p["replicas_by_path"] for p in published] == [
        {"cuda_ipc": 0, "network": n} for n in (2, 2, 2, 1, 1, 3, 3)
    ]
