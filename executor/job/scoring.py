"""The reward of each generated sample: the repeat task's verifier or the job's reward function,
behind one call a replica makes per sample.

- `RepeatTaskScorer` scores token ids with `RepeatTask.score`, exactly as the replicas have
  scored the built-in task so far (no decoding: the task's checker reads tokens).
- `RewardFunctionScorer` decodes the response as veRL does (the end-of-sequence token dropped,
  special tokens skipped) and calls the loaded `RewardFunction` with the prompt's data source,
  ground truth and extra info. A function that raises or returns something that is not a finite
  number raises `RewardFunctionError` naming the function, the prompt, the sample and the row it
  came from; it crosses Ray intact, so the driver can stop the run with that one line.

`build_scorer` picks one from the run's `reward:` section (none: the repeat task).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..rl.task import RepeatTask
from .config import RewardConfig
from .prompt_source import PromptItem
from .reward import RewardFunction, RewardInput, load_reward


@dataclass(frozen=True)
class SampleScore:
    reward: float
    details: dict[str, Any] = field(default_factory=dict)
    """What the reward reported beside its score (a mapping's other keys; the task's
    `correct`)."""


class SampleScorer(Protocol):
    def score(
        self,
        item: PromptItem,
        response_token_ids: Sequence[int],
        *,
        finished: bool,
        sample_index: int,
    ) -> SampleScore:
        """The reward of one response to `item`. `finished`: it ended with end-of-sequence
        (the token is then the last of `response_token_ids`), not at the length cap."""
        ...


class Decoder(Protocol):
    def decode(self, token_ids: list[int], **kwargs: Any) -> str: ...


class RepeatTaskScorer:
    """The repeat task's own checker on the response tokens."""

    def __init__(self, task: RepeatTask) -> None:
        self.task = task

    def score(
        self,
        item: PromptItem,
        response_token_ids: Sequence[int],
        *,
        finished: bool,
        sample_index: int,
    ) -> SampleScore:
        answer = str(item.ground_truth)
        if not answer or answer.strip(answer[0]):
            raise ValueError(f"{item.origin}: ground truth {answer!r} is not a run of one letter")
        task_item = self.task.make_item(
            prompt_id=item.prompt_id, letter=answer[0], count=len(answer)
        )
        verdict = self.task.score(task_item, list(response_token_ids))
        return SampleScore(reward=verdict.reward, details={"correct": verdict.correct})


class RewardFunctionScorer:
    """A veRL-style reward function on the decoded response."""

    def __init__(
        self, reward: RewardFunction, tokenizer: Decoder, *, eos_token_ids: Sequence[int]
    ) -> None:
        self.reward = reward
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(eos_token_ids)

    def score(
        self,
        item: PromptItem,
        response_token_ids: Sequence[int],
        *,
        finished: bool,
        sample_index: int,
    ) -> SampleScore:
        outcome = self.reward(self.reward_input(item, response_token_ids, finished, sample_index))
        return SampleScore(reward=outcome.score, details=outcome.details)

    def reward_input(
        self, item: PromptItem, response_token_ids: Sequence[int], finished: bool, index: int
    ) -> RewardInput:
        ids = list(response_token_ids)
        if finished and ids and ids[-1] in self.eos_token_ids:
            ids = ids[:-1]
        return RewardInput(
            data_source=item.data_source,
            solution_str=self.tokenizer.decode(ids, skip_special_tokens=True),
            ground_truth=item.ground_truth,
            extra_info=item.extra_info,
            finished=finished,
            sample=f"prompt {item.prompt_id} sample {index} ({item.origin})",
        )


def build_scorer(
    reward: RewardConfig | None,
    *,
    task: RepeatTask | None = None,
    tokenizer: Decoder | None = None,
    eos_token_ids: Sequence[int] = (),
    base_dir: Path | None = None,
) -> SampleScorer:
    """The repeat task's scorer when `reward` is None, else the configured reward function on
    responses decoded with `tokenizer` (a relative `reward.path` is read from `base_dir`)."""
    if reward is None:
        return RepeatTaskScorer(task or RepeatTask())
    if tokenizer is None:
        raise ValueError("a reward function scores text: build_scorer needs the tokenizer")
    return RewardFunctionScorer(
        load_reward(reward, base_dir=base_dir), tokenizer, eos_token_ids=eos_token_ids
    )
