"""Where a live run's prompts come from: the built-in repeat task or a veRL-format dataset, behind
one interface.

The driver holds one `PromptSource` and asks it for batch k at step k (or k+1, one step off);
the replicas receive the batch's `PromptItem`s (ids, token ids, what the reward needs) and never
draw prompts themselves, so a dataset is read and tokenized once, before Ray starts. Batch ids
are asked in order, one after the other; `state_dict` records where the source stands, so a
checkpoint taken after batch k was drawn resumes with batch k+1 (in one_step_off mode the
checkpoint already holds the next batch, generated: the source then stands one batch further).

Prompt ids are `batch_id * prompts_per_step + i` for both sources, as the repeat task has always
numbered them: unique within a run, the same whoever computes them, and what each sample's seed
is derived from.

- `RepeatPromptSource`: `RepeatTask.sample_items(seed, step)`; the same prompts, ids and token
  ids as the run has drawn so far; the ground truth is the expected answer (`ccc` for `3*c=`).
- `DatasetPromptSource`: `PromptSampler` over a `PromptDataset` (executor/job/dataset.py): the
  seeded epoch order, and the row's data source, ground truth and extra info for the reward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..rl.task import RepeatTask
from .config import DataConfig
from .dataset import ChatTokenizer, PromptDataset, load_prompt_dataset
from .prompt_sampler import PromptSampler, SamplerStateError

REPEAT_DATA_SOURCE = "repeat"
"""The `data_source` of the built-in repeat task's prompts."""


@dataclass(frozen=True)
class PromptItem:
    """One prompt of a batch, as a replica needs it: to generate, and to score the responses."""

    prompt_id: int
    prompt_token_ids: tuple[int, ...]
    data_source: str
    ground_truth: Any
    extra_info: dict[str, Any] | None
    origin: str
    """Where the prompt comes from, for errors and records (`train.parquet: row 530`)."""

    @property
    def extra_info_index(self) -> str | None:
        """The row's `extra_info.index` as text (datasets use integers and string ids alike),
        so that a sample's records name the row in the user's own terms; None without one."""
        index = (self.extra_info or {}).get("index")
        return None if index is None else str(index)


@runtime_checkable
class PromptSource(Protocol):
    """Batches of prompts in order, with a position a checkpoint saves."""

    prompts_per_step: int

    @property
    def longest_prompt_tokens(self) -> int:
        """The longest prompt it can give (an engine's sequence length is this plus the
        response cap)."""
        ...

    def next_batch(self, batch_id: int) -> list[PromptItem]:
        """The prompts of batch `batch_id`, which must be the batch after the last one given
        (the first: 0, or the one after the restored position)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready position, for the checkpoint."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved position; refuse one saved for another source."""
        ...

    def notes(self) -> list[str]:
        """Lines for the run's trace notes (what reading the prompts did)."""
        ...


class _InOrder:
    """The batch-order bookkeeping both sources share."""

    kind: str
    next_batch_id: int = 0

    def _take(self, batch_id: int) -> None:
        if batch_id != self.next_batch_id:
            raise RuntimeError(
                f"prompt source: batch {batch_id} asked, but the next one is {self.next_batch_id}"
            )
        self.next_batch_id += 1

    def _check_kind(self, state: dict[str, Any]) -> None:
        if state.get("kind") != self.kind:
            raise SamplerStateError(
                f"--resume: the checkpoint's prompts came from {state.get('kind')!r}, this run "
                f"draws them from {self.kind!r}"
            )


class RepeatPromptSource(_InOrder):
    """The built-in repeat task's prompts, drawn from (seed, batch id)."""

    kind = "repeat"

    def __init__(self, task: RepeatTask, *, seed: int, prompts_per_step: int) -> None:
        self.task = task
        self.seed = seed
        self.prompts_per_step = prompts_per_step
        self.next_batch_id = 0

    @property
    def longest_prompt_tokens(self) -> int:
        """`<bos>`, the count's digits, `*`, the letter, `=`."""
        return 1 + len(str(self.task.config.max_count)) + 3

    def next_batch(self, batch_id: int) -> list[PromptItem]:
        self._take(batch_id)
        items = self.task.sample_items(
            seed=self.seed, step=batch_id, num_prompts=self.prompts_per_step
        )
        return [
            PromptItem(
                prompt_id=item.prompt_id,
                prompt_token_ids=item.prompt_token_ids,
                data_source=REPEAT_DATA_SOURCE,
                ground_truth=item.letter * item.count,
                extra_info=None,
                origin=f"repeat task prompt {item.prompt_text}",
            )
            for item in items
        ]

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "next_batch_id": self.next_batch_id,
            "seed": self.seed,
            "prompts_per_step": self.prompts_per_step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_kind(state)
        for name in ("seed", "prompts_per_step"):
            if state.get(name) != getattr(self, name):
                raise SamplerStateError(
                    f"--resume: the checkpoint's prompts were drawn with {name}="
                    f"{state.get(name)!r}, this run has {getattr(self, name)!r}"
                )
        self.next_batch_id = int(state["next_batch_id"])

    def notes(self) -> list[str]:
        return [
            f"prompts: repeat task, counts {self.task.config.min_count}-"
            f"{self.task.config.max_count}"
        ]


class DatasetPromptSource(_InOrder):
    """A veRL-format dataset's prompts, in the `PromptSampler`'s seeded epoch order."""

    kind = "dataset"

    def __init__(self, dataset: PromptDataset, sampler: PromptSampler) -> None:
        self.dataset = dataset
        self.sampler = sampler
        self.prompts_per_step = sampler.batch_size
        self.next_batch_id = 0

    @classmethod
    def from_config(
        cls,
        config: DataConfig,
        tokenizer: ChatTokenizer,
        *,
        run_seed: int,
        prompts_per_step: int,
        context_tokens: int | None = None,
    ) -> DatasetPromptSource:
        """Read, render and tokenize the files (every error names the file and row), and draw
        with `config.seed`, or the run's seed when it is None. `context_tokens`: what the
        model's context leaves for a prompt once the response cap is set aside."""
        dataset = load_prompt_dataset(config, tokenizer, context_tokens=context_tokens)
        sampler = PromptSampler(
            len(dataset),
            batch_size=prompts_per_step,
            seed=run_seed if config.seed is None else config.seed,
            shuffle=config.shuffle,
            fingerprint=dataset.fingerprint,
        )
        return cls(dataset, sampler)

    @property
    def longest_prompt_tokens(self) -> int:
        return max(len(prompt.token_ids) for prompt in self.dataset.prompts)

    def next_batch(self, batch_id: int) -> list[PromptItem]:
        self._take(batch_id)
        prompts = self.dataset.take(self.sampler.next_batch())
        first_id = batch_id * self.prompts_per_step
        return [
            PromptItem(
                prompt_id=first_id + i,
                prompt_token_ids=prompt.token_ids,
                data_source=prompt.row.data_source,
                ground_truth=prompt.row.ground_truth,
                extra_info=prompt.row.extra_info,
                origin=str(prompt.row.place),
            )
            for i, prompt in enumerate(prompts)
        ]

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "next_batch_id": self.next_batch_id,
            "sampler": self.sampler.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_kind(state)
        self.sampler.load_state_dict(state["sampler"])
        self.next_batch_id = int(state["next_batch_id"])

    def notes(self) -> list[str]:
        return self.dataset.stats.notes()
