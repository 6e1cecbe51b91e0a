"""Prompt sources (the repeat task, a veRL dataset) and per-sample scorers (the task's verifier, a
reward function): what the replicas receive and how each response is rewarded."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaresize.executor.job.config import DataConfig, RewardConfig
from dynaresize.executor.job.prompt_sampler import SamplerStateError
from dynaresize.executor.job.prompt_source import (
    DatasetPromptSource,
    PromptItem,
    PromptSource,
    RepeatPromptSource,
)
from dynaresize.executor.job.reward import RewardFunctionError
from dynaresize.executor.job.scoring import RepeatTaskScorer, RewardFunctionScorer, build_scorer
from dynaresize.executor.rl.task import LETTERS, TOKENIZER, RepeatTask, RepeatTaskConfig

ARITHMETIC = Path(__file__).resolve().parents[2] / "dynaresize" / "data" / "arithmetic"
TASK = RepeatTask(RepeatTaskConfig(max_count=40))


def draw(source: PromptSource, batch_ids: range) -> list[list[PromptItem]]:
    return [source.next_batch(b) for b in batch_ids]


def test_the_repeat_source_gives_the_task_prompts_in_order_and_resumes():
    source = RepeatPromptSource(TASK, seed=3, prompts_per_step=5)
    assert isinstance(source, PromptSource)
    batches = draw(source, range(4))
    for batch_id, batch in enumerate(batches):
        expected = TASK.sample_items(seed=3, step=batch_id, num_prompts=5)
        assert [i.prompt_id for i in batch] == [e.prompt_id for e in expected]
        assert [i.prompt_token_ids for i in batch] == [e.prompt_token_ids for e in expected]
        assert [i.ground_truth for i in batch] == [e.letter * e.count for e in expected]
    assert max(len(i.prompt_token_ids) for b in batches for i in b) <= source.longest_prompt_tokens
    with pytest.raises(RuntimeError, match="batch 6 asked, but the next one is 4"):
        source.next_batch(6)

    crashed = RepeatPromptSource(TASK, seed=3, prompts_per_step=5)
    draw(crashed, range(2))
    resumed = RepeatPromptSource(TASK, seed=3, prompts_per_step=5)
    resumed.load_state_dict(json.loads(json.dumps(crashed.state_dict())))
    assert draw(resumed, range(2, 4)) == batches[2:]
    with pytest.raises(SamplerStateError, match="seed=3, this run has 4"):
        RepeatPromptSource(TASK, seed=4, prompts_per_step=5).load_state_dict(crashed.state_dict())


@pytest.fixture(scope="module")
def arithmetic_source_args():
    from dynaresize.executor.job.char_model import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    config = DataConfig(train_files=(str(ARITHMETIC / "test.parquet"),), max_prompt_tokens=64)
    return config, tokenizer


def arithmetic_source(args, *, seed: int = 0) -> DatasetPromptSource:
    config, tokenizer = args
    return DatasetPromptSource.from_config(config, tokenizer, run_seed=seed, prompts_per_step=8)


def test_the_dataset_source_follows_the_sampler_and_resumes_exactly(arithmetic_source_args):
    source = arithmetic_source(arithmetic_source_args)
    dataset, order = source.dataset, source.sampler.order(0)
    batches = draw(source, range(20))  # past the first epoch (100 rows, 12 batches of 8)
    for batch_id, batch in enumerate(batches[:3]):
        rows = [dataset[int(i)] for i in order[8 * batch_id : 8 * batch_id + 8]]
        assert [i.prompt_id for i in batch] == list(range(8 * batch_id, 8 * batch_id + 8))
        assert [i.prompt_token_ids for i in batch] == [r.token_ids for r in rows]
        assert [i.ground_truth for i in batch] == [r.row.ground_truth for r in rows]
        assert [i.origin for i in batch] == [str(r.row.place) for r in rows]
        assert all(i.origin.startswith(f"{ARITHMETIC / 'test.parquet'}: row ") for i in batch)
    epoch0 = {i.origin for b in batches[:12] for i in b}
    assert len(epoch0) == 12 * 8  # no prompt twice in an epoch
    assert source.notes()[0].startswith("data: 100 rows read from 1 file(s)")
    assert source.longest_prompt_tokens == max(len(p.token_ids) for p in dataset.prompts)

    for stop in (0, 1, 11, 12, 13):  # around the epoch boundary
        crashed = arithmetic_source(arithmetic_source_args)
        draw(crashed, range(stop))
        resumed = arithmetic_source(arithmetic_source_args)
        resumed.load_state_dict(json.loads(json.dumps(crashed.state_dict())))
        assert draw(resumed, range(stop, stop + 4)) == batches[stop : stop + 4]
    with pytest.raises(SamplerStateError, match="seed"):
        arithmetic_source(arithmetic_source_args, seed=1).load_state_dict(crashed.state_dict())
    with pytest.raises(SamplerStateError, match="came from 'repeat'"):
        arithmetic_source(arithmetic_source_args).load_state_dict(
            RepeatPromptSource(TASK, seed=0, prompts_per_step=8).state_dict()
        )


@settings(max_examples=80, deadline=None)
@given(
    batch_id=st.integers(0, 50),
    index=st.integers(0, 3),
    response=st.lists(st.sampled_from(LETTERS[:3] + "7"), max_size=45),
    finished=st.booleans(),
)
def test_the_repeat_scorer_is_the_task_checker(batch_id, index, response, finished):
    item = RepeatPromptSource(TASK, seed=1, prompts_per_step=4)
    item.next_batch_id = batch_id
    prompt = item.next_batch(batch_id)[index]
    task_item = TASK.sample_items(seed=1, step=batch_id, num_prompts=4)[index]
    token_ids = TOKENIZER.encode("".join(response)) + ([TOKENIZER.eos_token_id] if finished else [])
    expected = TASK.score(task_item, token_ids)
    score = RepeatTaskScorer(TASK).score(prompt, token_ids, finished=finished, sample_index=0)
    assert (score.reward, score.details["correct"]) == (expected.reward, expected.correct)


def test_a_reward_function_gets_the_decoded_response_and_names_a_bad_sample(
    arithmetic_source_args, tmp_path
):
    _, tokenizer = arithmetic_source_args
    item = arithmetic_source(arithmetic_source_args).next_batch(0)[0]
    eos = tokenizer.eos_token_id
    scorer = build_scorer(
        RewardConfig(builtin="final_number"), tokenizer=tokenizer, eos_token_ids=[eos]
    )
    assert isinstance(scorer, RewardFunctionScorer)

    def response(text: str, *, finished: bool = True) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False) + ([eos] if finished else [])

    right = f"so #### {item.ground_truth}"
    assert scorer.score(item, response(right), finished=True, sample_index=0).reward == 1.0
    assert (
        scorer.score(item, response(right, finished=False), finished=False, sample_index=0).reward
        == 1.0
    )
    assert scorer.score(item, response("#### 100000"), finished=True, sample_index=1).reward == 0.0
    seen = scorer.reward_input(item, response(right), True, 2)
    assert seen.solution_str == right and seen.ground_truth == item.ground_truth
    assert seen.extra_info == item.extra_info and seen.data_source == item.data_source

    (tmp_path / "reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': 1.0, 'length': len(solution_str)} if solution_str else 1 / 0\n"
    )
    user = build_scorer(RewardConfig(path="reward.py"), tokenizer=tokenizer, base_dir=tmp_path)
    assert user.score(item, response("ab"), finished=True, sample_index=0).details == {"length": 2}
    with pytest.raises(RewardFunctionError) as caught:
        user.score(item, [eos], finished=True, sample_index=3)
    message = str(caught.value)
    assert f"prompt {item.prompt_id} sample 3 ({item.origin})" in message
    assert "raised ZeroDivisionError" in message and "\n" not in message
    assert str(pickle.loads(pickle.dumps(caught.value))) == message  # crosses Ray intact


def test_without_a_reward_section_the_repeat_task_scores():
    assert isinstance(build_scorer(None, task=TASK), RepeatTaskScorer)
    with pytest.raises(ValueError, match="needs the tokenizer"):
        build_scorer(RewardConfig(builtin="final_number"))
