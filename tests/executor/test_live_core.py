"""GRPO on the live executor's own pieces, in one process: the rollout role generates, the batch
is collected as the driver collects it, the trainer role trains on it and the replica takes the
new weights as a weight sync gives them. A short run on a fixed seed raises the reward; a batch
carries every sample once with its lineage, packs into the rows the loss reads, and is the same
however its prompts are split over replicas."""

from __future__ import annotations

import pickle

import pytest
import torch

from dynaresize.executor.batch import RolloutBatch
from dynaresize.executor.config import LiveConfig
from dynaresize.executor.job.live_job import prepare_prompt_source, replica_scorer
from dynaresize.executor.rl.model import build_model
from dynaresize.executor.rl.task import TOKENIZER
from dynaresize.executor.worker.objective import pack
from dynaresize.executor.worker.rollout import (
    RolloutRole,
    collect_batch,
    sampler_config,
    sampling_params,
)
from dynaresize.executor.worker.trainer import TrainerRole
from tests.single_trainer import single_rank_trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LIVE = LiveConfig.model_validate(
    {
        "task": {"max_count": 16},
        "num_workers": 2,
        "initial_allocation": "1:1",
        "prompts_per_step": 8,
        "samples_per_prompt": 4,
        "max_response_tokens": 32,
        "micro_batch_samples": 32,
        "optimizer": {"lr": 1e-2},
        "seed": 0,
    }
)
CPU = torch.device("cpu")


def _replica(worker_id: int, *, weights_version: int = 0) -> RolloutRole:
    """A rollout replica as a live worker builds it (its own model object)."""
    return RolloutRole(
        worker_id=worker_id,
        model=build_model(LIVE.model),
        scorer=replica_scorer(LIVE),
        sampler=sampler_config(LIVE),
        params=sampling_params(LIVE),
        samples_per_prompt=LIVE.samples_per_prompt,
        weights_version=weights_version,
    )


def _trainer() -> TrainerRole:
    """A single trainer rank with the model's initial weights, as `initial_shard` loads them."""
    trainer = single_rank_trainer(LIVE)
    trainer.load_moments({})
    return trainer


def _rollout(batch_id: int, replicas: dict[int, RolloutRole]) -> RolloutBatch:
    """Batch `batch_id`, its prompts drawn and split over `replicas` as the driver does."""
    source = prepare_prompt_source(LIVE)
    source.load_state_dict(source.state_dict() | {"next_batch_id": batch_id})
    items = source.next_batch(batch_id)
    size = -(-len(items) // len(replicas))
    reports = {
        worker: replica.generate(batch_id=batch_id, items=items[i * size : (i + 1) * size])
        for i, (worker, replica) in enumerate(replicas.items())
    }
    return collect_batch(batch_id, reports, objective=LIVE.objective)


def test_a_short_run_raises_the_reward() -> None:
    trainer, replica = _trainer(), _replica(1)
    mean_rewards = []
    for step in range(12):
        batch = _rollout(step, {1: replica})
        assert batch.weights_version == step
        mean_rewards.append(sum(s.reward for s in batch.samples) / len(batch.samples))
        report = trainer.train(batch.samples, num_batch_tokens=int(batch.response_lengths().sum()))
        assert report.weights_version == step and len(report.consumed) == len(batch.samples)
        # the weight sync: the trainer's model, flat, into the replica's engine
        flat = torch.cat([p.detach().reshape(-1) for p in trainer.model.parameters()])
        replica.load_weights(flat, weights_version=step + 1)
    first, last = sum(mean_rewards[:3]) / 3, sum(mean_rewards[-3:]) / 3
    assert last > first + 0.05, mean_rewards
    assert trainer.optimizer_step == 12


def test_a_batch_has_every_sample_once_with_its_lineage_and_packs_into_rows() -> None:
    batch = _rollout(3, {1: _replica(1, weights_version=2)})
    expected = [(3 * 8 + p, i) for p in range(8) for i in range(4)]
    assert [s.key for s in batch.samples] == expected  # every sample once, grouped by prompt
    assert {s.batch_id for s in batch.samples} == {3}
    assert {s.weights_version for s in batch.samples} == {2} and batch.weights_version == 2
    assert {s.generated_by_device for s in batch.samples} == {1}
    for sample in batch.samples:
        assert len(sample.response_token_ids) <= LIVE.max_response_tokens
        if sample.hit_length_cap:
            assert len(sample.response_token_ids) == LIVE.max_response_tokens
    rows = pack(batch.samples, device=CPU, pad_token_id=TOKENIZER.pad_token_id)
    for row, sample in enumerate(batch.samples):
        prompt_len = len(sample.prompt_token_ids)
        total = prompt_len + len(sample.response_token_ids)
        assert rows.input_ids[row, prompt_len:total].tolist() == list(sample.response_token_ids)
        assert int(rows.response_mask[row].sum()) == len(sample.response_token_ids)
        assert int(rows.attention_mask[row].sum()) == total
    group_sums = rows.advantages.reshape(8, 4).sum(dim=1)
    assert torch.allclose(group_sums, torch.zeros(8), atol=1e-4)
    assert pickle.loads(pickle.dumps(batch)) == batch  # travels between Ray workers


def test_the_batch_is_the_same_however_its_prompts_are_split_over_replicas() -> None:
    one = _rollout(5, {1: _replica(1)})
    # three replicas, reports arriving in another order
    split = _rollout(5, {3: _replica(3), 1: _replica(1), 2: _replica(2)})
    strip = [(s.key, s.response_token_ids, s.reward, s.advantage) for s in one.samples]
    assert [(s.key, s.response_token_ids, s.reward, s.advantage) for s in split.samples] == strip
    assert {s.generated_by_device for s in split.samples} == {1, 2, 3}
