"""The rewards shipped with the project, each a verifier (no learned judge).

`final_number` has the signature of a user's reward function (veRL's `compute_score`), so it is
what a user file doing the same thing would look like. `repeat` scores the built-in repeat task
with that task's own checker (`RepeatTask.score`); it needs to know whether the response ended
with end-of-sequence, which a plain `compute_score` is not told, so it takes the whole input.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from ..rl.task import LETTERS, TOKENIZER, RepeatTask

FINAL_NUMBER = re.compile(r"####\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)")
"""`#### ` then a number (commas between digits allowed), as GSM8K writes its answers."""


def final_number(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    *,
    score: float = 1.0,
    format_score: float = 0.0,
) -> float:
    """`score` when the last `#### N` in the response equals the ground truth as a number
    (`#### 1,000` matches 1000, `#### 42.0` matches 42), `format_score` when there is a
    `#### N` but it differs, 0 when there is none."""
    matches = FINAL_NUMBER.findall(solution_str)
    if not matches:
        return 0.0
    answer = _number(matches[-1])
    expected = _number(str(ground_truth))
    if expected is None:
        raise ValueError(f"ground_truth {ground_truth!r} is not a number")
    return score if answer == expected else format_score


def _number(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", "").strip())
    except InvalidOperation:
        return None


_REPEAT = RepeatTask()


def repeat(solution_str: str, ground_truth: Any, *, finished: bool) -> float:
    """The repeat task's reward for a response; the ground truth is the correct answer (a run of
    one letter, `ccc` for the prompt `3*c=`). `finished`: the response ended with
    end-of-sequence rather than at the length cap."""
    answer = str(ground_truth)
    if not answer or answer.strip(answer[0]) or answer[0] not in LETTERS:
        raise ValueError(f"ground_truth {ground_truth!r} is not a run of one letter of {LETTERS}")
    item = _REPEAT.make_item(prompt_id=0, letter=answer[0], count=len(answer))
    return _REPEAT.score(item, _task_token_ids(solution_str, finished=finished)).reward


def _task_token_ids(text: str, *, finished: bool) -> list[int]:
    """The response as the task tokenizer's ids. A character outside the task alphabet (a model
    with a larger vocabulary can write one) is a wrong character: it counts towards the length
    and is not the letter, so it stands as the pad id, which the checker treats exactly so."""
    known = set(TOKENIZER.tokens)
    ids = [TOKENIZER.encode(ch)[0] if ch in known else TOKENIZER.pad_token_id for ch in text]
    return [*ids, TOKENIZER.eos_token_id] if finished else ids
