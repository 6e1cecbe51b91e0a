"""The single-process loop: a short GRPO run on a fixed seed raises the reward."""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")

from dynaresize.executor.rl.engine import FinishReason, GenerationResult  # noqa: E402
from dynaresize.executor.rl.grpo import GRPOConfig  # noqa: E402
from dynaresize.executor.rl.loop import (  # noqa: E402
    RLConfig,
    RLLoop,
    build_rollout_batch,
    make_train_batch,
    score_results,
)
from dynaresize.executor.rl.sampler import SamplerConfig  # noqa: E402
from dynaresize.executor.rl.task import RepeatTaskConfig  # noqa: E402

CONFIG = RLConfig(
    task=RepeatTaskConfig(max_count=16),
    sampler=SamplerConfig(max_batch_size=32, max_seq_len=40),
    grpo=GRPOConfig(learning_rate=1e-2),
    max_new_tokens=32,
    num_prompts_per_step=8,
    num_samples_per_prompt=4,
    num_minibatches=2,
    num_steps=12,
    seed=0,
)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_short_run_raises_the_reward():
    loop = RLLoop(CONFIG)
    history = loop.run()
    rewards = [m.mean_reward for m in history]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.05, rewards
    assert loop.policy_version == CONFIG.num_steps
    assert all(m.cap_fraction <= 1.0 and m.train.num_tokens > 0 for m in history)


def test_rollout_batch_lineage_and_train_batch_layout():
    loop = RLLoop(CONFIG)
    batch = build_rollout_batch(
        engine=loop.engine, task=loop.task, config=CONFIG, step=3, policy_version=2
    )
    identities = [(s.prompt_id, s.sample_index) for s in batch.samples]
    expected = [(3 * 8 + p, i) for p in range(8) for i in range(4)]
    assert identities == expected  # every sample once, grouped by prompt
    assert {s.step for s in batch.samples} == {3}
    assert {s.policy_version for s in batch.samples} == {2}
    for sample in batch.samples:
        assert len(sample.response_token_ids) <= CONFIG.max_new_tokens
        if sample.finish_reason == FinishReason.LENGTH:
            assert len(sample.response_token_ids) == CONFIG.max_new_tokens
    train = make_train_batch(batch, grpo=CONFIG.grpo, pad_token_id=0)
    for row, sample in enumerate(batch.samples):
        prompt_len = len(sample.prompt_token_ids)
        total = prompt_len + len(sample.response_token_ids)
        assert train.input_ids[row, prompt_len:total].tolist() == list(sample.response_token_ids)
        assert int(train.response_mask[row].sum()) == len(sample.response_token_ids)
        assert int(train.attention_mask[row].sum()) == total
    # results gathered from several replicas in any order score into the same batch
    results = [
        GenerationResult(
            s.prompt_id, s.sample_index, s.response_token_ids, s.finish_reason, s.finish_s
        )
        for s in reversed(batch.samples)
    ]
    items = loop.task.sample_items(seed=CONFIG.seed, step=3, num_prompts=8)
    rescored = score_results(task=loop.task, items=items, results=results, step=3, policy_version=2)
    assert rescored == batch.samples
    assert pickle.loads(pickle.dumps(batch)) == batch  # travels between Ray workers
    group_sums = train.advantages.reshape(8, 4).sum(dim=1)
    assert torch.allclose(group_sums, torch.zeros(8), atol=1e-4)
