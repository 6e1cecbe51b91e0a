"""Each worker's part of a step, as the trace records it: a trainer's step split into compute,
collectives and update (with the wait for moments still loading after a resize), a replica's
call with its engine's share; and whether a resize's background moves have ended."""

from __future__ import annotations

import threading
import time

import pandas as pd
import pytest
import torch

from dynaresize.executor.batch import RolloutBatch
from dynaresize.executor.config import LiveConfig
from dynaresize.executor.step_records import worker_step_records
from dynaresize.executor.worker.deferred_optimizer import DeferredOptimizerState
from dynaresize.executor.worker.microbatch import length_buckets
from dynaresize.executor.worker.overlapped import BackgroundWork, OverlappedWorkerSide
from dynaresize.executor.worker.rollout import RolloutReport, replica_step
from dynaresize.executor.worker.step_timing import PartClock
from dynaresize.executor.worker.trainer import TrainerRole
from dynaresize.traces.worker_steps import (
    ROLLOUT_REPLICA_KEY,
    TRAIN_WORKER_KEY,
    worker_steps_frame,
)
from tests.single_trainer import single_rank_trainer
from tests.trainer_samples import synthetic_batch

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LIVE = LiveConfig.model_validate({"optimizer": {"lr": 1e-2}, "micro_batch_samples": 4})
CPU = torch.device("cpu")


def _trainer(*, optimizer_step: int = 0) -> TrainerRole:
    return single_rank_trainer(LIVE, optimizer_step=optimizer_step)


def test_a_trainers_parts_add_up_within_its_step():
    trainer = _trainer()
    trainer.load_moments({})
    samples = synthetic_batch(0)
    tokens = sum(len(s.response_token_ids) for s in samples)
    report = trainer.train(samples, num_batch_tokens=tokens)
    parts = report.parts
    assert parts is not None
    expected = length_buckets([s.num_tokens for s in samples], max_tokens=None, max_rows=4)
    assert parts.micro_batches == len(expected) == 3
    assert parts.token_budget is None  # rows decide on a CPU
    measured = parts.compute_s + parts.all_reduce_s + parts.optimizer_s + parts.all_gather_s
    assert 0 < measured <= report.train_s
    assert parts.compute_s > parts.all_reduce_s  # one trainer: no collective to speak of
    assert parts.moments_wait_s == 0.0
    assert parts.device_free_bytes is None and parts.device_allocs is None


def test_the_first_update_after_a_resize_reports_its_wait_for_the_moments():
    trainer = _trainer(optimizer_step=1)
    master, optimizer = trainer.master_and_optimizer()
    delay_s = 1.0

    def load():
        time.sleep(delay_s)
        zeros = torch.zeros_like(master.detach())
        return {master: trainer.adam_state({"exp_avg": zeros, "exp_avg_sq": zeros}, 1)}

    trainer.deferred_moments = DeferredOptimizerState(optimizer, load)
    samples = synthetic_batch(1)
    tokens = sum(len(s.response_token_ids) for s in samples)
    first = trainer.train(samples, num_batch_tokens=tokens).parts
    assert first is not None
    # the wait is the part of the load the forward and backward did not cover
    assert 0 < first.moments_wait_s <= first.optimizer_s
    assert first.moments_wait_s <= delay_s
    second = trainer.train(samples, num_batch_tokens=tokens).parts
    assert second is not None and second.moments_wait_s == 0.0  # installed already


def test_part_clock_on_a_cpu_times_consecutive_parts():
    clock = PartClock(CPU)
    time.sleep(0.02)
    clock.mark("a")
    clock.mark("b")
    seconds = clock.seconds()
    assert list(seconds) == ["a", "b"]
    assert seconds["a"] >= 0.015 and 0 <= seconds["b"] < seconds["a"]


def test_the_trace_gets_one_record_per_trainer_and_replica():
    trainer = _trainer()
    trainer.load_moments({})
    samples = synthetic_batch(2)
    tokens = sum(len(s.response_token_ids) for s in samples)
    report = trainer.train(samples, num_batch_tokens=tokens)
    replica = RolloutReport(
        worker_id=3,
        batch_id=0,
        weights_version=0,
        wall_s=1.5,
        samples=samples,
        engine_s=1.25,
        decode_iterations=24,
        host_load_1m=0.5,
    )
    batch = RolloutBatch(
        batch_id=0,
        weights_version=0,
        samples=samples,
        rollout_s=1.5,
        replicas=[replica_step(replica)],
    )
    rows = worker_step_records(4, batch, {0: report})
    extras = pd.DataFrame([r.model_dump() for r in rows])
    trainers = worker_steps_frame(extras, TRAIN_WORKER_KEY)
    replicas = worker_steps_frame(extras, ROLLOUT_REPLICA_KEY)
    assert list(trainers["worker_id"]) == [0] and list(trainers["step"]) == [4]
    assert trainers.loc[0, "train_s"] == report.train_s
    assert trainers.loc[0, "micro_batches"] == report.parts.micro_batches
    assert list(replicas["worker_id"]) == [3]
    assert replicas.loc[0, "engine_s"] == 1.25 and replicas.loc[0, "decode_iterations"] == 24
    assert replicas.loc[0, "response_tokens"] == sum(len(s.response_token_ids) for s in samples)
    assert worker_steps_frame(pd.DataFrame(), TRAIN_WORKER_KEY).empty


def test_background_moves_have_ended_only_when_every_send_and_load_has():
    side = OverlappedWorkerSide.__new__(OverlappedWorkerSide)
    side._background = None
    assert side.background_finished()
    release = threading.Event()
    sender = threading.Thread(target=release.wait)
    sender.start()
    side._background = BackgroundWork(started_wall=0.0, threads=[sender])
    assert not side.background_finished()
    release.set()
    sender.join()
    assert side.background_finished()
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    loaded = threading.Event()
    deferred = DeferredOptimizerState(optimizer, lambda: (loaded.wait(), {})[1])
    side._background = BackgroundWork(started_wall=0.0, deferred=deferred)
    assert not side.background_finished()
    loaded.set()
    deferred._finished.wait(5)
    assert side.background_finished()
