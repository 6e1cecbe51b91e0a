"""The workload's samples table of a run folder: written once, beside the rest, and linked into
every folder that shows a run without samples of its own.

At a million steps that table has over 10^8 rows and takes longer to encode than every other
file of the folder; the encoder (pyarrow) lets go of the interpreter while it works, so the
table is written on a thread of its own while the tables, traces and pictures of the runs are
written beside it, and linked into place (`link_or_copy`) once all of them are. It is written
into a private folder next to the run folder's staging folder (each writer of a folder may
replace that folder whole until it is done) and the private folder is removed on the way out,
failure or not.
"""

from __future__ import annotations

import shutil
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

from dynaresize.traces.staged_dir import record_output_entries

from .simulation import SimContext

__all__ = ["SAMPLES_FILE", "SharedSamples"]

SAMPLES_FILE = "samples.parquet"


class SharedSamples:
    """`with SharedSamples(context, beside=staging) as samples:` starts writing the table;
    `samples.attach(folder)` names a folder that gets it; leaving the block puts it there."""

    def __init__(self, context: SimContext, *, beside: Path, needed: bool = True) -> None:
        self._context = context
        self._needed = needed
        self._beside = beside
        self._folders: list[Path] = []
        self._private: Path | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._written: Future[Path] | None = None

    def __enter__(self) -> SharedSamples:
        from dynaresize.traces.parquet_io import ROWS_PER_CHUNK
        from dynaresize.traces.workload_parquet import write_workload_samples

        if not self._needed:  # every run has samples of its own
            return self
        self._private = Path(
            tempfile.mkdtemp(
                prefix=f".{self._beside.name}.", suffix=".samples", dir=self._beside.parent
            )
        )
        blocks = self._context.workload_blocks(ROWS_PER_CHUNK)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="samples")
        self._written = self._pool.submit(
            write_workload_samples, self._private / SAMPLES_FILE, blocks
        )
        return self

    def attach(self, folder: Path) -> None:
        """`folder` (written by then, when the block is left) gets the samples table."""
        if self._written is None:
            raise ValueError("no shared samples table is written: none was asked for")
        self._folders.append(folder)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        from dynaresize.traces.parquet_io import link_or_copy

        if self._pool is None or self._written is None or self._private is None:
            return
        try:
            self._pool.shutdown(wait=True)
            if kind is not None:
                return
            table = self._written.result()  # its error, if any, is the write's
            for folder in self._folders:
                link_or_copy(table, folder / SAMPLES_FILE)
                record_output_entries(folder, [SAMPLES_FILE])
        finally:
            shutil.rmtree(self._private, ignore_errors=True)
