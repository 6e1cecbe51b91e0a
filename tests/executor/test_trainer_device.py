"""The device trainer against the host reference (the trainer step as it ran before it moved onto
the device): the same update for 1, 2 and 3 trainers, a resize between 1 and 2 trainers within
the semantics bound, log-probs of response tokens equal to the RL core's, length buckets that
cover every sample once within the budget.

Bound: relative error of whole vectors below 1e-3, as in the resize semantics tests (the
different summation order of length-bucketed micro-batches and of the reduction is far below it,
a skipped or doubled micro-batch far above). Time: about 2 minutes on 2 loaded cores (three groups
of spawned ranks, each importing torch and transformers; one rank runs in the test's process).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dynaresize.executor.config import LiveConfig
from dynaresize.executor.rl import grpo
from dynaresize.executor.rl.model import build_model
from dynaresize.executor.rl.task import TOKENIZER
from dynaresize.executor.testing.trainer_ranks import GroupJob, run_group
from dynaresize.executor.worker.collectives import CollectivePath, choose_path, collective_note
from dynaresize.executor.worker.microbatch import (
    length_buckets,
    micro_batch_token_budget,
    response_logprobs,
    response_positions,
)
from dynaresize.executor.worker.objective import pack
from tests.host_reference_trainer import HostReferenceTrainer
from tests.trainer_samples import synthetic_batch

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LIVE = LiveConfig.model_validate({"optimizer": {"lr": 1e-2}, "micro_batch_samples": 4})
BATCHES = [synthetic_batch(seed) for seed in range(3)]
BOUND = 1e-3


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.fixture(scope="module")
def reference() -> dict[str, torch.Tensor]:
    model = build_model(LIVE.model).requires_grad_(True)
    trainer = HostReferenceTrainer(
        model, settings=LIVE.optimizer, objective=LIVE.objective, micro_batch_samples=4
    )
    initial = trainer.master.detach().clone()
    for batch in BATCHES:
        trainer.train(batch, num_batch_tokens=sum(len(s.response_token_ids) for s in batch))
    return {**trainer.state(), "initial": initial}


def _job(batches, **fields) -> GroupJob:
    return GroupJob(
        model=LIVE.model,
        settings=LIVE.optimizer,
        objective=LIVE.objective,
        batches=batches,
        micro_batch_samples=LIVE.micro_batch_samples,
        **fields,
    )


def _assert_within_bound(state: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]):
    update = state["master"] - reference["initial"]
    reference_update = reference["master"] - reference["initial"]
    assert _relative_error(reference_update, torch.zeros_like(reference_update)) > 0.5
    assert _relative_error(update, reference_update) < BOUND
    for key in ("exp_avg", "exp_avg_sq"):
        assert _relative_error(state[key], reference[key]) < BOUND, key


@pytest.mark.parametrize("num_ranks", [1, 2, 3])
def test_the_update_equals_the_host_reference(num_ranks, reference) -> None:
    result = run_group(_job(BATCHES), num_ranks)
    assert result.optimizer_step == len(BATCHES)
    _assert_within_bound(result.state, reference)
    # the model holds the gathered master weights
    assert torch.equal(result.weights, result.state["master"])


def test_a_resize_between_one_and_two_trainers_keeps_the_semantics_bound(reference) -> None:
    first = run_group(_job(BATCHES[:1]), 1)
    # two ranks on the host path, as two trainers sharing one GPU run
    middle_job = _job(BATCHES[1:2], start=first.state, start_step=1, path=CollectivePath.HOST)
    middle = run_group(middle_job, 2)
    last = run_group(_job(BATCHES[2:], start=middle.state, start_step=2), 1)
    assert last.optimizer_step == len(BATCHES)
    _assert_within_bound(last.state, reference)


def test_response_logprobs_are_the_rl_cores_at_the_response_tokens() -> None:
    model = build_model(LIVE.model)
    samples = BATCHES[0]
    batch = pack(samples, device=torch.device("cpu"), pad_token_id=TOKENIZER.pad_token_id)
    with torch.no_grad():
        full = grpo.token_logprobs(model, batch)
        positions = response_positions(samples, batch.input_ids.shape[1])
        mine = response_logprobs(model, batch, positions, chunk_tokens=7)
    expected = torch.cat(
        [
            full[row, len(s.prompt_token_ids) : len(s.prompt_token_ids) + len(s.response_token_ids)]
            for row, s in enumerate(samples)
        ]
    )
    assert mine.shape == expected.shape
    torch.testing.assert_close(mine, expected, rtol=1e-5, atol=1e-5)


def test_the_trainers_forward_skips_the_mask_preparations_read_of_the_device(monkeypatch) -> None:
    """Hugging Face's packed-sequence check reads a boolean back from the device (one host copy
    per micro-batch on CUDA); the trainer's forward must not run it, must give the same
    log-probs as the model's own SDPA path, and must leave the model's configuration as it was."""
    import transformers.masking_utils as masking

    model = build_model(LIVE.model)
    assert model.config._attn_implementation == "sdpa"
    samples = BATCHES[0]
    batch = pack(samples, device=torch.device("cpu"), pad_token_id=TOKENIZER.pad_token_id)
    positions = response_positions(samples, batch.input_ids.shape[1])
    checks: list[int] = []
    original = masking.find_packed_sequence_indices

    def counted(position_ids: torch.Tensor) -> torch.Tensor | None:
        checks.append(1)
        return original(position_ids)

    monkeypatch.setattr(masking, "find_packed_sequence_indices", counted)
    with torch.no_grad():
        own = model.base_model(input_ids=batch.input_ids, use_cache=False).last_hidden_state
        assert checks, "the model's own path no longer runs the check: this test proves nothing"
        checks.clear()
        mine = response_logprobs(model, batch, positions, chunk_tokens=7)
    assert checks == []
    assert model.config._attn_implementation == "sdpa"
    head = model.get_output_embeddings()
    rows, width = batch.input_ids.shape
    picked = own.reshape(rows * width, -1).index_select(0, positions - 1)
    targets = batch.input_ids.reshape(-1).index_select(0, positions)
    logits = head(picked).float()
    expected = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)
    torch.testing.assert_close(mine, expected, rtol=1e-5, atol=1e-5)


@given(
    lengths=st.lists(st.integers(1, 50), min_size=1, max_size=40),
    max_tokens=st.one_of(st.none(), st.integers(1, 400)),
    max_rows=st.one_of(st.none(), st.integers(1, 8)),
)
def test_length_buckets_cover_every_sample_once_within_the_budget(
    lengths, max_tokens, max_rows
) -> None:
    buckets = length_buckets(lengths, max_tokens=max_tokens, max_rows=max_rows)
    assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))
    for bucket in buckets:
        longest = max(lengths[i] for i in bucket)
        assert lengths[bucket[0]] == longest
        if len(bucket) > 1 and max_tokens is not None:
            assert len(bucket) * longest <= max_tokens
        if max_rows is not None:
            assert len(bucket) <= max_rows


def test_the_collective_path_follows_where_the_trainers_are() -> None:
    one = choose_path(["gpu-a"], device_type="cuda")
    assert one.path is CollectivePath.NONE and one.backend is None
    shared = choose_path(["gpu-a", "gpu-a"], device_type="cuda")
    assert (shared.path, shared.backend) == (CollectivePath.IPC, "gloo")
    some_shared = choose_path(["gpu-a", "gpu-a", "gpu-b"], device_type="cuda")
    assert (some_shared.path, some_shared.backend) == (CollectivePath.HOST, "gloo")
    distinct = choose_path(["gpu-a", "gpu-b"], device_type="cuda")
    assert (distinct.path, distinct.backend) == (CollectivePath.DEVICE, "nccl")
    cpu = choose_path(["cpu", "cpu", "cpu"], device_type="cpu")
    assert (cpu.path, cpu.backend) == (CollectivePath.DEVICE, "gloo")
    assert "ipc/gloo" in collective_note(device_type="cuda", num_workers=4, num_gpus=1)
    assert "host/gloo" in collective_note(device_type="cuda", num_workers=4, num_gpus=2)
    assert "device/nccl" in collective_note(device_type="cuda", num_workers=4, num_gpus=4)


def test_the_memory_check_sizes_micro_batches_by_free_memory_and_sharing() -> None:
    model = build_model(LIVE.model)
    cpu = torch.device("cpu")
    assert micro_batch_token_budget(model, cpu, checkpointing=False, sharing_trainers=1) is None
    free = 8 << 30
    alone = micro_batch_token_budget(
        model, cpu, checkpointing=False, sharing_trainers=1, free_bytes=free
    )
    shared = micro_batch_token_budget(
        model, cpu, checkpointing=False, sharing_trainers=2, free_bytes=free
    )
    recomputed = micro_batch_token_budget(
        model, cpu, checkpointing=True, sharing_trainers=1, free_bytes=free
    )
    assert alone is not None and shared is not None and recomputed is not None
    assert shared < alone < recomputed
