"""A trace's workload left in its samples file and read a block of whole steps at a time.

A long run's samples table holds over a hundred million rows; held whole, its two lengths take
two gigabytes before anything is computed from them. Every step-level quantity a replay needs
(stage times, length statistics, the rollout fit's counts) is a function of one step's samples,
so a replay reads the file again, two columns and a block of whole steps at a time, whenever it
needs the lengths: a `WorkloadStream` is that file once it has been found clean, in
(step, sample_index) order and holding every row for a step of the trace
(`traces.sample_lengths.read_sample_lengths` checks it, a block at a time too).

`workload_blocks` gives a held `Workload` or a stream as the same blocks of
(first step, block), so a caller need not know which it has. pyarrow is imported where a stream
is read: the twin's simulations, which take either kind, load neither it nor pandas.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import TraceError
from .workload import Workload

__all__ = ["STREAM_BLOCK_SAMPLES", "WorkloadStream", "workload_blocks"]

STREAM_BLOCK_SAMPLES = 1 << 22
"""Samples of a stream read at a time (whole steps, at least one): 4M samples, 64 MB of
lengths."""

BATCH_ROWS = 1 << 20
"""Rows decoded at a time (a row group as the project writes them); blocks are joined from
them."""

_LENGTHS = ("prompt_tokens", "response_tokens")


@dataclass(frozen=True)
class WorkloadStream:
    """The samples file `path` read as a workload: step k owns the file's rows
    `step_offsets[k]:step_offsets[k + 1]`, every row a sample of the trace's steps, in order."""

    path: Path
    step_offsets: np.ndarray
    """num_steps + 1 non-decreasing offsets into the file's rows, starting at 0."""
    name: str = "workload"

    @classmethod
    def of_counts(cls, path: Path, counts: np.ndarray, *, name: str = "workload") -> WorkloadStream:
        """The stream whose steps hold `counts` consecutive rows each."""
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(Path(path), offsets, name)

    @property
    def num_steps(self) -> int:
        return len(self.step_offsets) - 1

    @property
    def num_samples(self) -> int:
        return int(self.step_offsets[-1])

    def blocks(self, block_samples: int | None = None) -> Iterator[tuple[int, Workload]]:
        """(first step, its block's workload) for blocks of whole steps of at most
        `block_samples` samples (default `STREAM_BLOCK_SAMPLES`; one step where a step holds
        more), read in file order."""
        if block_samples is None:
            block_samples = STREAM_BLOCK_SAMPLES
        if block_samples < 1:
            raise ValueError("block_samples must be at least 1")
        import pyarrow as pa

        from .arrow_frame import unreadable

        offsets = self.step_offsets
        batches = self._batches(block_samples)
        try:
            pending: list[np.ndarray] = []
            have, first = 0, 0
            while first < self.num_steps:
                lo = int(offsets[first])
                last = int(np.searchsorted(offsets, lo + block_samples, side="right")) - 1
                last = min(max(last, first + 1), self.num_steps)
                need = int(offsets[last]) - lo
                while have < need:
                    batch = next(batches)
                    pending.append(batch)
                    have += batch.shape[1]
                joined = pending[0] if len(pending) == 1 else np.concatenate(pending, axis=1)
                block, rest = joined[:, :need], joined[:, need:]
                pending, have = ([rest] if rest.shape[1] else []), rest.shape[1]
                yield (
                    first,
                    Workload(
                        np.ascontiguousarray(block[0]),
                        np.ascontiguousarray(block[1]),
                        offsets[first : last + 1] - lo,
                        self.name,
                    ),
                )
                first = last
        except (pa.ArrowException, OSError) as err:
            raise unreadable(self.path, err) from None
        finally:
            # The reader let go first, then the pages Arrow's allocator would keep of what it
            # read for later reads (hundreds of MB over a long file; the stream is read a few
            # times, far apart).
            batches.close()
            pa.default_memory_pool().release_unused()

    def _batches(self, block_samples: int) -> Generator[np.ndarray, None, None]:
        """The file's two lengths, (2, rows) int64 a batch of rows at a time."""
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(self.path)
        if parquet.metadata.num_rows != self.num_samples:
            raise TraceError(
                f"{parquet.metadata.num_rows} rows, not the {self.num_samples} samples it was "
                "read with: the file changed while it was in use",
                source=str(self.path),
            )
        rows = min(block_samples, BATCH_ROWS)
        for batch in parquet.iter_batches(
            batch_size=rows, columns=list(_LENGTHS), use_threads=False
        ):
            yield np.stack(
                [batch.column(name).to_numpy().astype(np.int64, copy=False) for name in _LENGTHS]
            )

    def held(self) -> Workload:
        """The whole workload in memory (two int64 lengths a sample)."""
        prompt = np.empty(self.num_samples, dtype=np.int64)
        response = np.empty(self.num_samples, dtype=np.int64)
        for first, block in self.blocks():
            lo = int(self.step_offsets[first])
            hi = lo + len(block.prompt_tokens)
            prompt[lo:hi], response[lo:hi] = block.prompt_tokens, block.response_tokens
        return Workload(prompt, response, self.step_offsets, self.name)


def workload_blocks(
    workload: Workload | WorkloadStream, block_samples: int | None = None
) -> Iterator[tuple[int, Workload]]:
    """A stream's blocks, or a held workload as one block (0, workload)."""
    if isinstance(workload, WorkloadStream):
        yield from workload.blocks(block_samples)
    else:
        yield 0, workload
