"""The device trainer on CUDA (skipped without it): one trainer's step copies nothing to host
memory (the CUDA profiler's memcpy events are counted), a resize between one trainer and two
trainers sharing the GPU keeps the semantics bound of the resize tests, and trainers that share
the GPU reduce through CUDA IPC to bitwise the same sum on every rank (the rank-order sum), with
the same update as the host path's.

The model is a small Qwen2 shape with Qwen2's 151,936-token vocabulary, so the chunked output
head runs as it does at full size. Time on an H200: about a minute (two spawned ranks).
"""

from __future__ import annotations

import pytest
import torch

from dynaresize.executor.config import LiveConfig
from dynaresize.executor.rl.model import build_model
from dynaresize.executor.rl.model_spec import QWEN2_VOCAB_SIZE, ModelSpec
from dynaresize.executor.testing.exchange_ranks import ExchangeJob, rank_vector, run_exchange
from dynaresize.executor.testing.trainer_ranks import GroupJob, run_group, single_trainer
from dynaresize.executor.worker.collectives import CollectivePath
from dynaresize.executor.worker.shards import ShardLayout
from dynaresize.executor.worker.trainer import TrainerRole
from tests.host_reference_trainer import HostReferenceTrainer
from tests.trainer_samples import synthetic_batch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

SHAPE = {
    "model_type": "qwen2",
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "tie_word_embeddings": True,
    "vocab_size": QWEN2_VOCAB_SIZE,
}
LIVE = LiveConfig.model_validate({"optimizer": {"lr": 1e-3}, "micro_batch_samples": 4})
BATCHES = [synthetic_batch(seed, num_samples=16, vocab=QWEN2_VOCAB_SIZE) for seed in range(3)]
BOUND = 1e-3


def _spec(dtype: str) -> ModelSpec:
    return ModelSpec.model_validate({"config": SHAPE, "dtype": dtype})


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _tokens(batch) -> int:
    return sum(len(s.response_token_ids) for s in batch)


def _one_trainer(dtype: str) -> TrainerRole:
    device = torch.device("cuda", torch.cuda.current_device())
    return single_trainer(
        build_model(_spec(dtype), device=device).requires_grad_(True),
        device,
        settings=LIVE.optimizer,
        objective=LIVE.objective,
        micro_batch_samples=LIVE.micro_batch_samples,
    )


def _memcpy_events(prof) -> dict[str, int]:
    counts = {"dtoh": 0, "htod": 0}
    for event in prof.events():
        name = event.name.lower()
        if "memcpy dtoh" in name or "device -> pageable" in name or "device -> pinned" in name:
            counts["dtoh"] += 1
        elif "memcpy htod" in name:
            counts["htod"] += 1
    return counts


def test_one_trainers_step_moves_no_bytes_to_the_host() -> None:
    from torch.profiler import ProfilerActivity, profile

    trainer = _one_trainer("bfloat16")
    trainer.train(BATCHES[0], num_batch_tokens=_tokens(BATCHES[0]))  # warm: kernels, allocator
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        figures = trainer.step(BATCHES[1], num_batch_tokens=_tokens(BATCHES[1]))
        torch.cuda.synchronize()
    counts = _memcpy_events(prof)
    assert counts["htod"] > 0, counts  # the profiler sees copies: the batch goes up
    assert counts["dtoh"] == 0, counts
    assert figures.device.type == "cuda" and bool(torch.isfinite(figures).all())
    assert trainer.optimizer_step == 2
    master, optimizer = trainer.master_and_optimizer()
    assert master.device.type == "cuda"
    assert all(t.device.type == "cuda" for t in optimizer.state[master].values())


def test_the_cuda_update_equals_the_host_reference() -> None:
    trainer = _one_trainer("float32")
    reference = HostReferenceTrainer(
        build_model(_spec("float32"), device=trainer.device).requires_grad_(True),
        settings=LIVE.optimizer,
        objective=LIVE.objective,
        micro_batch_samples=LIVE.micro_batch_samples,
    )
    initial = reference.master.detach().clone()
    for batch in BATCHES:
        trainer.train(batch, num_batch_tokens=_tokens(batch))
        reference.train(batch, num_batch_tokens=_tokens(batch))
    expected = reference.state()
    shard = trainer.export_shard()
    assert _relative_error(shard.master - initial, expected["master"] - initial) < BOUND
    for key in ("exp_avg", "exp_avg_sq"):
        assert _relative_error(shard.moments[key], expected[key]) < BOUND, key


def _cuda_job(batches, **fields) -> GroupJob:
    """A trainer group on the GPU (float32, so that paths and splits compare within BOUND)."""
    return GroupJob(
        model=_spec("float32"),
        settings=LIVE.optimizer,
        objective=LIVE.objective,
        batches=batches,
        micro_batch_samples=LIVE.micro_batch_samples,
        device="cuda",
        **fields,
    )


def test_a_resize_between_one_and_two_trainers_on_one_gpu_keeps_the_bound() -> None:
    unresized = run_group(_cuda_job(BATCHES), 1)
    first = run_group(_cuda_job(BATCHES[:1]), 1)
    # two ranks on one GPU: the ipc path, moments through the deferred reload
    middle = run_group(_cuda_job(BATCHES[1:2], start=first.state, start_step=1), 2)
    last = run_group(_cuda_job(BATCHES[2:], start=middle.state, start_step=2), 1)
    assert last.optimizer_step == unresized.optimizer_step == len(BATCHES)
    for key in ("master", "exp_avg", "exp_avg_sq"):
        assert _relative_error(last.state[key], unresized.state[key]) < BOUND, key


@pytest.mark.parametrize("num_ranks", [2, 3])
def test_trainers_on_one_gpu_reduce_through_ipc_to_the_rank_order_sum(num_ranks) -> None:
    numel = 1_000_003  # not a multiple of the ranks: the gather's padding is exercised
    ranks = run_exchange(ExchangeJob(numel=numel, repeats=2), num_ranks)
    assert [r.path for r in ranks] == ["ipc"] * num_ranks
    expected = rank_vector(0, numel)
    for peer in range(1, num_ranks):
        expected = expected + rank_vector(peer, numel)  # the ipc path's order: rank 0, 1, ...
    size = ShardLayout(numel=numel, num_ranks=num_ranks).padded_shard_numel
    gathered = torch.arange(1, num_ranks + 1, dtype=torch.float32).repeat_interleave(size)
    for rank in ranks:
        assert rank.ipc_reduced is not None and rank.host_reduced is not None
        assert torch.equal(rank.ipc_reduced, expected), rank.rank
        assert _relative_error(rank.host_reduced, expected) < 1e-6
        assert torch.equal(rank.ipc_gathered, gathered), rank.rank
        assert len(rank.seconds["ipc_all_reduce"]) == 2


@pytest.mark.parametrize("num_ranks", [2, 3])
def test_the_ipc_path_trains_as_the_host_path_does(num_ranks) -> None:
    ipc = run_group(_cuda_job(BATCHES), num_ranks)  # the trainer's own choice on one GPU: ipc
    host = run_group(_cuda_job(BATCHES, path=CollectivePath.HOST), num_ranks)
    assert ipc.optimizer_step == host.optimizer_step == len(BATCHES)
    for key in ("master", "exp_avg", "exp_avg_sq"):
        assert _relative_error(ipc.state[key], host.state[key]) < BOUND, key
    assert _relative_error(ipc.weights, host.weights) < BOUND
