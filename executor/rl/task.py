"""A built-in task whose correct answers have heavy-tailed lengths, checked by a verifier.

The prompt `37*c=` asks for the letter `c` written 37 times, then end-of-sequence. The count is
drawn from a discretised Pareto distribution, so most required answers are short and a few are
very long: the long tail of response lengths in a rollout comes from the model really generating
long answers, not from anything injected. The reward is verifiable (no learned judge): a checker
compares the response with the rule. It gives partial credit so that a small model learns from
the very first steps: the share of correct letters times how close the length is to the count.

The task has its own character-level tokenizer, so a model for it needs no download.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

PAD_TOKEN = "<pad>"
BOS_TOKEN = "<bos>"
EOS_TOKEN = "<eos>"
LETTERS = "abcdefgh"
_CHARACTERS = "0123456789" + LETTERS + "*="


class TaskInputError(ValueError):
    """A prompt or response could not be encoded or decoded by the task's tokenizer."""


class CharTokenizer:
    """Three special tokens, then one token per character of the task's alphabet."""

    def __init__(self) -> None:
        self.tokens: tuple[str, ...] = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, *_CHARACTERS)
        self._ids = {token: index for index, token in enumerate(self.tokens)}
        self.pad_token_id = self._ids[PAD_TOKEN]
        self.bos_token_id = self._ids[BOS_TOKEN]
        self.eos_token_id = self._ids[EOS_TOKEN]

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
        unknown = sorted({ch for ch in text if ch not in self._ids})
        if unknown:
            raise TaskInputError(
                f"characters {unknown} are not in the task alphabet {_CHARACTERS!r}"
            )
        ids = [self._ids[ch] for ch in text]
        return [self.bos_token_id, *ids] if add_bos else ids

    def decode(self, token_ids: list[int]) -> str:
        """Characters of the ids, stopping at the first end-of-sequence; ids outside the
        vocabulary (a model with a larger vocabulary can emit them) decode as `?`."""
        out = []
        for token_id in token_ids:
            if token_id == self.eos_token_id:
                break
            known = 0 <= token_id < len(self.tokens)
            out.append(self.tokens[token_id] if known else "?")
        return "".join(out)


TOKENIZER = CharTokenizer()


class RepeatTaskConfig(BaseModel):
    """How prompts of the repeat task are drawn."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["repeat"] = Field(
        default="repeat", description="Task name; only `repeat` is built in."
    )
    min_count: int = Field(default=1, ge=1, description="Smallest required answer length.")
    max_count: int = Field(
        default=96,
        ge=1,
        description="Largest required answer length (the Pareto tail is cut here).",
    )
    pareto_alpha: float = Field(
        default=0.8,
        gt=0,
        description="Tail index of the Pareto count distribution; smaller means a heavier tail.",
    )
    pareto_scale: float = Field(
        default=2.0, gt=0, description="Scale (smallest value) of the Pareto draw before rounding."
    )
    num_letters: int = Field(
        default=len(LETTERS), ge=1, le=len(LETTERS), description="How many letters prompts use."
    )

    @model_validator(mode="after")
    def _counts_ordered(self) -> RepeatTaskConfig:
        if self.max_count < self.min_count:
            raise ValueError(f"max_count ({self.max_count}) < min_count ({self.min_count})")
        return self


@dataclass(frozen=True)
class TaskItem:
    """One prompt and what its checker needs. `prompt_id` is unique within a run."""

    prompt_id: int
    letter: str
    count: int
    prompt_token_ids: tuple[int, ...]

    @property
    def prompt_text(self) -> str:
        return f"{self.count}*{self.letter}="

    @property
    def answer_token_ids(self) -> tuple[int, ...]:
        """The correct response, end-of-sequence included."""
        return (*TOKENIZER.encode(self.letter * self.count), TOKENIZER.eos_token_id)


@dataclass(frozen=True)
class Score:
    """The checker's verdict on one response."""

    reward: float
    correct: bool


class RepeatTask:
    """Draws prompts deterministically from (seed, step) and scores responses."""

    def __init__(self, config: RepeatTaskConfig | None = None) -> None:
        self.config = config or RepeatTaskConfig()

    def draw_counts(self, rng: np.random.Generator, num: int) -> np.ndarray:
        """Required lengths: a Pareto draw, rounded and clipped to [min_count, max_count]."""
        cfg = self.config
        raw = cfg.pareto_scale * (1.0 - rng.random(num)) ** (-1.0 / cfg.pareto_alpha)
        return np.clip(np.floor(raw), cfg.min_count, cfg.max_count).astype(np.int64)

    def make_item(self, *, prompt_id: int, letter: str, count: int) -> TaskItem:
        if letter not in LETTERS:
            raise TaskInputError(f"letter {letter!r} is not one of {LETTERS!r}")
        if count < 1:
            raise TaskInputError(f"count must be >= 1, got {count}")
        prompt = TOKENIZER.encode(f"{count}*{letter}=", add_bos=True)
        return TaskItem(
            prompt_id=prompt_id, letter=letter, count=count, prompt_token_ids=tuple(prompt)
        )

    def sample_items(self, *, seed: int, step: int, num_prompts: int) -> list[TaskItem]:
        """The prompts of one step. Prompt ids are `step * num_prompts + i`, so they are unique
        within a run and the same whoever draws them."""
        rng = np.random.default_rng([seed, step, 0x7A5C])
        counts = self.draw_counts(rng, num_prompts)
        letters = rng.integers(0, self.config.num_letters, size=num_prompts)
        return [
            self.make_item(
                prompt_id=step * num_prompts + i,
                letter=LETTERS[int(letters[i])],
                count=int(counts[i]),
            )
            for i in range(num_prompts)
        ]

    def score(self, item: TaskItem, response_token_ids: list[int] | tuple[int, ...]) -> Score:
        """Reward in [0, 1]: 1 exactly when the response is the letter `count` times followed by
        end-of-sequence. Otherwise half the share of response characters equal to the letter
        plus, if the response ended, half of (shorter / longer of response length and count):
        the two skills (copy the letter, stop at the right length) are rewarded separately so
        that a small model gets a signal for each from the first steps."""
        ids = list(response_token_ids)
        ended = TOKENIZER.eos_token_id in ids
        body = ids[: ids.index(TOKENIZER.eos_token_id)] if ended else ids
        letter_id = TOKENIZER.encode(item.letter)[0]
        if not body:
            return Score(reward=0.0, correct=False)
        matching = sum(1 for token_id in body if token_id == letter_id)
        letter_share = matching / len(body)
        length_ratio = min(len(body), item.count) / max(len(body), item.count)
        correct = ended and matching == len(body) == item.count
        length_score = length_ratio if ended else 0.0
        reward = 1.0 if correct else 0.5 * letter_share + 0.5 * length_score
        return Score(reward=reward, correct=correct)
