"""The order prompts are drawn in: a seeded shuffle per epoch, and a position a run can restore.

Each epoch is a permutation of the dataset drawn from (seed, epoch) alone, so any process that
knows the seed draws the same order, and epoch 7's order does not depend on how many batches came
before. Batches are consecutive slices of the epoch's order; the rows left over at the end of an
epoch (fewer than a batch) are skipped, as veRL's loader does with `drop_last`, so every batch is
full and each prompt appears at most once per epoch.

The position is (epoch, rows of that epoch already drawn). Saved with a checkpoint and restored,
it makes a resumed run draw exactly the batch the interrupted one would have drawn next. The saved
state also carries what the order depends on (dataset size and fingerprint, batch size, seed,
shuffle); restoring onto anything else is an error, since the continuation would not be the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dynaresize.config_io import ConfigError

_STREAM = 0x5EED_DA7A  # keeps these draws apart from other users of the run seed


class SamplerStateError(ConfigError):
    """A saved sampler position does not belong to this dataset or these settings."""


@dataclass(frozen=True)
class SamplerPosition:
    """Where the next batch starts: `index` rows of epoch `epoch`'s order are drawn already."""

    epoch: int = 0
    index: int = 0


class PromptSampler:
    """Draws batches of dataset indices: full batches, epoch after epoch, reproducibly."""

    def __init__(
        self,
        num_rows: int,
        *,
        batch_size: int,
        seed: int,
        shuffle: bool = True,
        fingerprint: str = "",
        position: SamplerPosition | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if num_rows < batch_size:
            raise ConfigError(
                f"data: {num_rows} prompts are left after reading the files, fewer than the "
                f"{batch_size} prompts one step draws (prompts_per_step)"
            )
        self.num_rows = num_rows
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.fingerprint = fingerprint
        self.position = position or SamplerPosition()
        self._order_epoch: int | None = None
        self._order = np.arange(0)

    @property
    def batches_per_epoch(self) -> int:
        return self.num_rows // self.batch_size

    def order(self, epoch: int) -> np.ndarray:
        """The dataset indices of epoch `epoch` in drawing order."""
        if not self.shuffle:
            return np.arange(self.num_rows)
        rng = np.random.default_rng([self.seed, epoch, _STREAM])
        return rng.permutation(self.num_rows)

    def next_batch(self) -> list[int]:
        """The next `batch_size` dataset indices; moves the position past them."""
        epoch, index = self.position.epoch, self.position.index
        if index + self.batch_size > self.num_rows:
            epoch, index = epoch + 1, 0
        if self._order_epoch != epoch:
            self._order, self._order_epoch = self.order(epoch), epoch
        batch = self._order[index : index + self.batch_size]
        self.position = SamplerPosition(epoch, index + self.batch_size)
        return [int(i) for i in batch]

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state: the position and everything the order depends on."""
        return {
            "epoch": self.position.epoch,
            "index": self.position.index,
            "num_rows": self.num_rows,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "fingerprint": self.fingerprint,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved position; refuse one saved for other data or settings."""
        for name in ("num_rows", "batch_size", "seed", "shuffle", "fingerprint"):
            saved, now = state.get(name), getattr(self, name)
            if saved != now:
                raise SamplerStateError(
                    f"--resume: the checkpoint's prompt order was drawn with {name}={saved!r}, "
                    f"this run has {name}={now!r}; resuming would not continue the same order"
                )
        epoch, index = int(state["epoch"]), int(state["index"])
        if epoch < 0 or not 0 <= index <= self.num_rows:
            raise SamplerStateError(f"--resume: sampler position ({epoch}, {index}) is invalid")
        self.position = SamplerPosition(epoch, index)
