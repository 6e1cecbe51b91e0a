"""The `data` and `reward` sections of a live run, as pure pydantic models.

They import nothing but pydantic, so a configuration is checked in a second, before Ray or torch
start, and the command line can validate a file on a machine without the `live` extra. Field
names follow veRL's where one exists (`train_files`, `prompt_key`, `path`, `name`), so a veRL
user recognises them; the prompt limit is `max_prompt_tokens` like the run's
`max_response_tokens`, and veRL's spelling `max_prompt_length` is read as well.

What is checked here is the shape of the values; whether the files exist, parse, and hold the
fields is checked when they are read (`dataset_files.read_rows`, `reward.load_reward`), which the
driver does before it starts anything.
"""

from __future__ import annotations

from enum import Enum
from pathlib import PurePath
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

DATA_FILE_SUFFIXES = (".parquet", ".jsonl")
"""The dataset files read: veRL's Parquet, and JSON Lines with the same fields."""


class OverlongPrompts(str, Enum):
    """What happens to a prompt with more tokens than the limit."""

    DROP = "drop"
    """Left out of the dataset and counted (veRL's `filter_overlong_prompts=True`)."""
    TRUNCATE = "truncate"
    """Its first tokens are cut so that the last `limit` remain (veRL's `truncation=left`)."""
    ERROR = "error"
    """The run does not start; the error names the file and the row (veRL's `truncation=error`)."""


class DataConfig(BaseModel):
    """Where the prompts come from and how they are drawn."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    train_files: tuple[str, ...] = Field(
        description="Parquet or JSONL files in veRL's dataset format, read in this order; one "
        "path or a list.",
    )
    prompt_key: str = Field(
        default="prompt",
        min_length=1,
        description="Field holding the prompt: a list of chat messages (rendered with the "
        "tokenizer's chat template) or a plain string (tokenized as is).",
    )
    max_prompt_tokens: int | None = Field(
        default=512,
        ge=1,
        description="Longest prompt in tokens after rendering (veRL: max_prompt_length); None: "
        "whatever fits in the model's context.",
    )
    overlong_prompts: OverlongPrompts = Field(
        default=OverlongPrompts.DROP,
        description="A prompt over the limit is dropped, left-truncated, or an error.",
    )
    shuffle: bool = Field(
        default=True, description="Draw each epoch in a fresh seeded order; False: file order."
    )
    seed: int | None = Field(
        default=None, ge=0, description="Seed of the shuffles; None: the run's seed."
    )
    max_rows: int | None = Field(
        default=None,
        ge=1,
        description="Use only the first N rows of the files (before dropping long prompts).",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra variables for the chat template, e.g. {enable_thinking: false}.",
    )

    @model_validator(mode="before")
    @classmethod
    def _verl_spelling(cls, value: Any) -> Any:
        """veRL calls the limit `max_prompt_length`; read it, refuse both at once."""
        if isinstance(value, dict) and "max_prompt_length" in value:
            if "max_prompt_tokens" in value:
                raise ValueError(
                    "give max_prompt_tokens or its veRL spelling max_prompt_length, not both"
                )
            value = dict(value)
            value["max_prompt_tokens"] = value.pop("max_prompt_length")
        return value

    @field_validator("train_files", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str | PurePath) else value

    @field_validator("train_files")
    @classmethod
    def _known_formats(cls, files: tuple[str, ...]) -> tuple[str, ...]:
        if not files:
            raise ValueError("give at least one file")
        for name in files:
            if PurePath(name).suffix.lower() not in DATA_FILE_SUFFIXES:
                raise ValueError(f"{name}: not a {' or '.join(DATA_FILE_SUFFIXES)} file")
        return files


class BuiltinReward(str, Enum):
    """Rewards shipped with the project."""

    FINAL_NUMBER = "final_number"
    """1 when the last `#### N` of the response equals the ground truth as a number (GSM8K
    style); keyword arguments `score` (default 1.0) and `format_score` (default 0.0, given when a
    `#### N` is there but wrong)."""
    REPEAT = "repeat"
    """The repeat task's verifier; the ground truth is the expected answer (`ccc` for `3*c=`)."""


class RewardConfig(BaseModel):
    """The reward of each sample: a user's Python function or a built-in, exactly one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str | None = Field(
        default=None,
        description="Python file defining the reward function (veRL: custom_reward_function.path).",
    )
    name: str = Field(
        default="compute_score",
        description="Function in `path`, called as name(data_source, solution_str, ground_truth, "
        "extra_info) and returning a float or a dict with a `score` (veRL: .name).",
    )
    builtin: BuiltinReward | None = Field(
        default=None, description="A shipped reward instead of a file: final_number or repeat."
    )
    kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra keyword arguments for every call (veRL: .reward_kwargs).",
    )

    @field_validator("name")
    @classmethod
    def _identifier(cls, name: str) -> str:
        if not name.isidentifier():
            raise ValueError(f"{name!r} is not a Python function name")
        return name

    @model_validator(mode="after")
    def _one_source(self) -> RewardConfig:
        if (self.path is None) == (self.builtin is None):
            raise ValueError("set exactly one of path (a Python file) and builtin")
        if self.builtin is not None and "name" in self.model_fields_set:
            raise ValueError("name picks a function in `path`; a builtin has none")
        if self.path is not None and PurePath(self.path).suffix != ".py":
            raise ValueError(f"path: {self.path} is not a .py file")
        return self

    @model_serializer(mode="wrap")
    def _no_name_for_a_builtin(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A builtin's dump leaves out `name` (which it refuses), so that the dumped config the
        workers receive, or a run folder's config.json, reads back as the same config."""
        data = handler(self)
        if self.builtin is not None and isinstance(data, dict):
            data.pop("name", None)
        return data
