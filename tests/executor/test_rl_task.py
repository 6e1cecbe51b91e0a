"""The repeat task: tokenizer, prompt drawing, and the checker on hand-written cases."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from dynaresize.executor.rl.task import TOKENIZER, RepeatTask, RepeatTaskConfig, TaskInputError

EOS = TOKENIZER.eos_token_id


def response(text: str, *, end: bool = True) -> list[int]:
    return TOKENIZER.encode(text) + ([EOS] if end else [])


@pytest.fixture
def item():
    return RepeatTask().make_item(prompt_id=0, letter="c", count=4)


def test_prompt_tokens_round_trip(item):
    assert item.prompt_text == "4*c="
    assert item.prompt_token_ids[0] == TOKENIZER.bos_token_id
    assert TOKENIZER.decode(list(item.prompt_token_ids[1:])) == "4*c="
    assert TOKENIZER.decode(list(item.answer_token_ids)) == "cccc"


@pytest.mark.parametrize(
    ("text", "end", "reward", "correct"),
    [
        ("cccc", True, 1.0, True),  # exactly right
        ("ccc", True, 0.5 * 1.0 + 0.5 * 3 / 4, False),  # one short
        ("cccccccc", True, 0.5 * 1.0 + 0.5 * 4 / 8, False),  # twice too long
        ("ccac", True, 0.5 * 3 / 4 + 0.5 * 1.0, False),  # one wrong letter, right length
        ("dddd", True, 0.5 * 0.0 + 0.5 * 1.0, False),  # wrong letter throughout
        ("cccc", False, 0.5 * 1.0, False),  # never ended: no length credit
        ("", True, 0.0, False),  # stopped at once
    ],
)
def test_checker_on_hand_written_cases(item, text, end, reward, correct):
    score = RepeatTask().score(item, response(text, end=end))
    assert score.reward == pytest.approx(reward)
    assert score.correct is correct


def test_tokens_after_end_of_sequence_are_ignored(item):
    assert RepeatTask().score(item, [*response("cccc"), *response("dd")]).correct


def test_unknown_token_ids_decode_as_question_marks():
    assert TOKENIZER.decode([TOKENIZER.encode("a")[0], 9999, EOS, 5]) == "a?"


def test_items_are_deterministic_and_ids_unique():
    task = RepeatTask()
    first = task.sample_items(seed=3, step=7, num_prompts=50)
    again = task.sample_items(seed=3, step=7, num_prompts=50)
    assert first == again
    assert [i.prompt_id for i in first] == list(range(350, 400))
    assert first != task.sample_items(seed=3, step=8, num_prompts=50)


def test_required_lengths_are_heavy_tailed_and_bounded():
    task = RepeatTask()
    counts = task.draw_counts(np.random.default_rng(0), 20_000)
    assert counts.min() >= task.config.min_count and counts.max() <= task.config.max_count
    p50, p99 = np.percentile(counts, [50, 99])
    assert p99 / p50 >= 10
    # the Pareto survival function: P(count >= k) = (scale / k) ** alpha before clipping
    alpha, scale = task.config.pareto_alpha, task.config.pareto_scale
    assert np.mean(counts >= 20) == pytest.approx((scale / 20) ** alpha, abs=0.01)


def test_bad_inputs_are_named():
    with pytest.raises(TaskInputError, match="alphabet"):
        TOKENIZER.encode("x")
    with pytest.raises(TaskInputError, match="letter"):
        RepeatTask().make_item(prompt_id=0, letter="z", count=3)
    with pytest.raises(ValidationError, match="max_count"):
        RepeatTaskConfig(min_count=10, max_count=5)
