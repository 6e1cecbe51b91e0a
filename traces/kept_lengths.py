"""What a trace keeps of its samples once read: their lengths held (`SampleLengths`), or the
clean file they stay in, read again a block of steps at a time (`StreamedSamples`), each with the
trace step that owns each run of samples (traces/sample_lengths.py reads them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .workload import Workload
from .workload_stream import WorkloadStream

__all__ = ["SampleLengths", "StreamedSamples"]


@dataclass(frozen=True)
class SampleLengths:
    """Every kept sample's lengths in (step, sample_index) order, and the steps they belong to:
    `step_ids[k]` owns `counts[k]` consecutive samples."""

    step_ids: np.ndarray
    counts: np.ndarray
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray

    @property
    def num_samples(self) -> int:
        return len(self.prompt_tokens)

    def workload_for(self, steps: np.ndarray, *, name: str) -> Workload | None:
        """The workload of `steps` when every one of them has samples and no sample belongs to
        another step; None otherwise (the caller infers what is missing)."""
        if not np.array_equal(self.step_ids, steps):
            return None
        offsets = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        return Workload(self.prompt_tokens, self.response_tokens, offsets, name=name)

    def held(self) -> SampleLengths:
        """These lengths (already held; `StreamedSamples.held` reads a file's)."""
        return self

    @classmethod
    def of_stream(cls, stream: WorkloadStream, step_ids: np.ndarray) -> SampleLengths:
        """A stream's lengths held, its k-th step being the trace's step `step_ids[k]`."""
        held = stream.held()
        counts = np.diff(stream.step_offsets).astype(np.int64)
        return cls(step_ids, counts, held.prompt_tokens, held.response_tokens)

    def frame(self) -> pd.DataFrame:
        """The samples as a table of step, rank within the step (as `sample_index`, which
        keeps their order) and lengths, for the inference of steps without samples."""
        starts = np.repeat(np.cumsum(self.counts) - self.counts, self.counts)
        return pd.DataFrame(
            {
                "step": np.repeat(self.step_ids, self.counts),
                "sample_index": np.arange(self.num_samples, dtype=np.int64) - starts,
                "prompt_tokens": self.prompt_tokens,
                "response_tokens": self.response_tokens,
            }
        )


@dataclass(frozen=True)
class StreamedSamples:
    """A samples file left on disk: `stream`'s k-th step is the trace's step `step_ids[k]`."""

    step_ids: np.ndarray
    stream: WorkloadStream

    @property
    def num_samples(self) -> int:
        return self.stream.num_samples

    def held(self) -> SampleLengths:
        """The lengths read whole (for what needs every sample at once)."""
        return SampleLengths.of_stream(self.stream, self.step_ids)
