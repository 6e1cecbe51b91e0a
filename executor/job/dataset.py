"""Turn checked rows into prompt token ids, as veRL does, and apply the prompt length limit.

A chat prompt is rendered with the tokenizer's chat template and the generation prompt
(`apply_chat_template(messages, add_generation_prompt=True, tokenize=False)`), then tokenized
without adding special tokens: the template already wrote them. A plain-string prompt is
tokenized as is, with the tokenizer's own special tokens (a Llama tokenizer adds its BOS), as a
completion server would. A prompt longer than the limit is dropped, left-truncated (its last
`limit` tokens are kept, as veRL's `truncation=left`) or an error, as configured; the counts go
to `DatasetStats.notes()` for the run's records.

The tokenizer is anything with Hugging Face's `apply_chat_template` and `encode`; this module
imports neither torch nor transformers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .config import DataConfig, OverlongPrompts
from .dataset_files import DataRow, DatasetError, read_rows


class ChatTokenizer(Protocol):
    """The part of a Hugging Face tokenizer the dataset uses."""

    chat_template: Any

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    def encode(self, text: str, **kwargs: Any) -> list[int]: ...


@dataclass(frozen=True, eq=False)
class Prompt:
    """One prompt of the dataset, ready for a rollout engine."""

    index: int
    """Position in the dataset (after long prompts were dropped): what the sampler draws."""
    row: DataRow
    text: str
    """The rendered prompt (chat template applied), before any truncation."""
    token_ids: tuple[int, ...]
    truncated: bool


@dataclass(frozen=True)
class DatasetStats:
    """What reading the dataset did, for the run's records."""

    files: tuple[str, ...]
    rows_read: int
    dropped_overlong: int
    truncated: int
    limit_tokens: int | None
    longest_prompt_tokens: int

    def notes(self) -> list[str]:
        limit = "no limit" if self.limit_tokens is None else f"limit {self.limit_tokens} tokens"
        return [
            f"data: {self.rows_read} rows read from {len(self.files)} file(s); {limit}; "
            f"{self.dropped_overlong} dropped as too long, {self.truncated} left-truncated; "
            f"longest prompt {self.longest_prompt_tokens} tokens"
        ]


@dataclass(frozen=True, eq=False)
class PromptDataset:
    """The prompts a run draws from, and a fingerprint that changes when any of them does."""

    prompts: tuple[Prompt, ...]
    stats: DatasetStats
    fingerprint: str

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, index: int) -> Prompt:
        return self.prompts[index]

    def take(self, indices: Sequence[int]) -> list[Prompt]:
        return [self.prompts[i] for i in indices]


def prompt_limit(config: DataConfig, *, context_tokens: int | None) -> int | None:
    """The longest prompt allowed: `max_prompt_tokens`, or what the model's context leaves for a
    prompt (`context_tokens`, the caller's context length minus the response cap), the smaller."""
    limits = [n for n in (config.max_prompt_tokens, context_tokens) if n is not None]
    return min(limits) if limits else None


def load_prompt_dataset(
    config: DataConfig, tokenizer: ChatTokenizer, *, context_tokens: int | None = None
) -> PromptDataset:
    """Read, check, render and tokenize every row of `config.train_files`."""
    return build_prompt_dataset(read_rows(config), config, tokenizer, context_tokens=context_tokens)


def build_prompt_dataset(
    rows: Sequence[DataRow],
    config: DataConfig,
    tokenizer: ChatTokenizer,
    *,
    context_tokens: int | None = None,
) -> PromptDataset:
    """Render and tokenize `rows`, applying the limit as `config.overlong_prompts` says."""
    if any(row.is_chat for row in rows) and not getattr(tokenizer, "chat_template", None):
        first = next(row for row in rows if row.is_chat)
        raise DatasetError(
            f"{first.place}: {config.prompt_key} holds chat messages but the model's tokenizer "
            "has no chat template (give plain-string prompts or a tokenizer with one)"
        )
    limit = prompt_limit(config, context_tokens=context_tokens)
    prompts: list[Prompt] = []
    dropped = truncated = longest = 0
    for row in rows:
        text = render_prompt(row, tokenizer, chat_template_kwargs=config.chat_template_kwargs)
        token_ids = tokenize_prompt(row, text, tokenizer)
        longest = max(longest, len(token_ids))
        cut = limit is not None and len(token_ids) > limit
        if cut and config.overlong_prompts is OverlongPrompts.DROP:
            dropped += 1
            continue
        if cut and config.overlong_prompts is OverlongPrompts.ERROR:
            raise DatasetError(_too_long(row, len(token_ids), limit, config, context_tokens))
        if cut:
            token_ids = token_ids[len(token_ids) - limit :]  # type: ignore[operator]
            truncated += 1
        prompts.append(Prompt(len(prompts), row, text, tuple(token_ids), truncated=cut))
    if not prompts:
        raise DatasetError(
            f"data: all {len(rows)} prompts are longer than {limit} tokens; nothing is left "
            "to train on (raise data.max_prompt_tokens or use overlong_prompts: truncate)"
        )
    stats = DatasetStats(
        files=tuple(config.train_files),
        rows_read=len(rows),
        dropped_overlong=dropped,
        truncated=truncated,
        limit_tokens=limit,
        longest_prompt_tokens=longest,
    )
    return PromptDataset(tuple(prompts), stats, fingerprint=_fingerprint(prompts))


def render_prompt(
    row: DataRow, tokenizer: ChatTokenizer, *, chat_template_kwargs: dict[str, Any] | None = None
) -> str:
    """The prompt text the model sees: the chat template over the messages, with the generation
    prompt; a plain string unchanged."""
    if isinstance(row.prompt, str):
        return row.prompt
    try:
        text = tokenizer.apply_chat_template(
            [dict(message) for message in row.prompt],
            add_generation_prompt=True,
            tokenize=False,
            **(chat_template_kwargs or {}),
        )
    except Exception as err:  # a template error is the user's data or template: name the row
        raise DatasetError(f"{row.place}: the chat template failed on this prompt: {err}") from None
    if not isinstance(text, str):
        raise DatasetError(f"{row.place}: the chat template returned {type(text).__name__}")
    return text


def tokenize_prompt(row: DataRow, text: str, tokenizer: ChatTokenizer) -> list[int]:
    """Token ids of a rendered prompt (no special tokens added to a rendered chat)."""
    token_ids = list(tokenizer.encode(text, add_special_tokens=not row.is_chat))
    if not token_ids:
        raise DatasetError(f"{row.place}: the prompt has no tokens once rendered")
    return token_ids


def _too_long(
    row: DataRow, num_tokens: int, limit: int | None, config: DataConfig, context: int | None
) -> str:
    sources = []
    if config.max_prompt_tokens is not None:
        sources.append(f"data.max_prompt_tokens is {config.max_prompt_tokens}")
    if context is not None:
        sources.append(f"the model's context leaves {context} tokens for a prompt")
    return (
        f"{row.place}: the prompt has {num_tokens} tokens, more than {limit} "
        f"({'; '.join(sources)}); set data.overlong_prompts to drop or truncate to go on"
    )


def _fingerprint(prompts: Sequence[Prompt]) -> str:
    """A short hash of every prompt's tokens, data source and ground truth, in order."""
    digest = hashlib.sha256()
    for prompt in prompts:
        entry = [prompt.token_ids, prompt.row.data_source, prompt.row.ground_truth]
        digest.update(json.dumps(entry, default=str, sort_keys=True).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:16]
