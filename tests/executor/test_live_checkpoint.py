"""Checkpoints of a live run: what one_step_off needs to resume (the batch already generated for
the next step) survives the round trip exactly, and a crash between the two renames of a save
still leaves a loadable checkpoint."""

from __future__ import annotations

import os

import pytest
import torch

from dynaresize.executor.batch import RolloutBatch, RolloutSample
from dynaresize.executor.run_folder import checkpoint as ckpt
from dynaresize.policies.types import Allocation


def _checkpoint(next_step: int) -> ckpt.Checkpoint:
    gen = torch.Generator().manual_seed(next_step)
    samples = [
        RolloutSample(
            batch_id=next_step,
            prompt_id=next_step * 2 + p,
            sample_index=i,
            prompt_token_ids=(1, 4, 5),
            response_token_ids=tuple(range(3 + p + i)),
            reward=0.25 * i,
            hit_length_cap=i == 1,
            finish_s=0.5 + i,
            generated_by_device=2,
            weights_version=next_step - 1,
            advantage=-1.5 + i,
        )
        for p in range(2)
        for i in range(2)
    ]
    return ckpt.Checkpoint(
        next_step=next_step,
        weights_version=next_step,
        allocation=Allocation.parse("3:1"),
        vectors={k: torch.randn(37, generator=gen) for k in ("master", "exp_avg", "exp_avg_sq")},
        pending_batch=RolloutBatch(
            batch_id=next_step,
            weights_version=next_step - 1,
            samples=samples,
            rollout_s=1.25,
            replica_s={3: 1.25},
        ),
        num_resizes=2,
    )


def test_a_checkpoint_round_trips_weights_state_and_the_pending_batch(tmp_path) -> None:
    saved = _checkpoint(4)
    ckpt.save(tmp_path, saved)
    loaded = ckpt.load(tmp_path)
    for key, value in saved.vectors.items():
        assert torch.equal(loaded.vectors[key], value)
    assert loaded.pending_batch == saved.pending_batch
    assert (loaded.next_step, loaded.weights_version, loaded.allocation, loaded.num_resizes) == (
        4,
        4,
        Allocation.parse("3:1"),
        2,
    )


def test_a_newer_save_replaces_the_older_and_a_half_done_save_falls_back(tmp_path) -> None:
    ckpt.save(tmp_path, _checkpoint(2))
    ckpt.save(tmp_path, _checkpoint(3))
    assert ckpt.load(tmp_path).next_step == 3
    # a crash after moving the old checkpoint aside but before the new one took its place
    os.replace(tmp_path / ckpt.CHECKPOINT_DIR, tmp_path / (ckpt.CHECKPOINT_DIR + ".old"))
    assert ckpt.load(tmp_path).next_step == 3


def test_resume_without_a_checkpoint_is_a_user_error(tmp_path) -> None:
    with pytest.raises(ckpt.CheckpointError, match="no checkpoint"):
        ckpt.load(tmp_path)
