"""The workload's samples table of a run folder: written once, beside the rest, and linked into
every folder that shows a run without samples of its own.

At a million steps that table has over 10^8 rows and takes longer to encode than every other
file of the folder; the encoder (pyarrow) and the draws of the lengths (numpy) let go of the
interpreter while they work, so the table is written on a thread of its own. It depends on the
workload alone, so it can start as soon as the run's context is built (`start`): drawn and
encoded on the second core while the policies are simulated, it is done, or nearly, by the
time the folder is written. It is written into a private folder beside the destination (each
writer of a folder may replace its staging folder whole until it is done), linked into place
(`link_or_copy`) once the folders that hold it are written, and the private folder is removed
on the way out, failure or not; a failure stops the writing thread at its next row group.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from dynaresize.traces.staged_dir import record_output_entries

from .simulation import SimContext

__all__ = ["SAMPLES_FILE", "SharedSamples", "WritingStopped"]

SAMPLES_FILE = "samples.parquet"

T = TypeVar("T")


class WritingStopped(Exception):
    """The run failed while the table was being written: the writer gave up."""


def _until_stopped(items: Iterable[T], stop: threading.Event) -> Iterator[T]:
    """`items`, raising WritingStopped before the next one once `stop` is set."""
    for item in items:
        if stop.is_set():
            raise WritingStopped
        yield item


class SharedSamples:
    """`with SharedSamples(context, beside=staging) as samples:` starts writing the table;
    `samples.attach(folder)` names a folder that gets it; leaving the block puts it there.

    Without a context, nothing starts until `start(context)`: a command that knows its
    destination before it simulates opens the block first and starts the table as soon as the
    context exists (`run_comparison(..., samples=...)`). Entering a started one again (the
    folder writer does) neither restarts it nor, on leaving, does it twice: the first way out
    links the table (or, after a failure, stops it), later ones do nothing.
    """

    def __init__(
        self, context: SimContext | None = None, *, beside: Path, needed: bool = True
    ) -> None:
        self._context = context
        self._needed = needed
        self._beside = Path(beside)
        self._folders: list[Path] = []
        self._private: Path | None = None
        self._created: list[Path] = []
        """Folders above the destination made for the private folder (removed if still empty)."""
        self._pool: ThreadPoolExecutor | None = None
        self._written: Future[Path] | None = None
        self._stop = threading.Event()

    @property
    def started(self) -> bool:
        return self._written is not None

    def start(self, context: SimContext) -> None:
        """Begin writing the samples table of `context`'s workload (once; not if not needed)."""
        from dynaresize.traces.parquet_io import ROWS_PER_CHUNK
        from dynaresize.traces.workload_parquet import write_workload_samples

        if self._written is not None or not self._needed:
            return
        self._context = context
        parent = self._beside.parent
        self._created = [p for p in [parent, *parent.parents] if not p.exists()]
        parent.mkdir(parents=True, exist_ok=True)
        self._private = Path(
            tempfile.mkdtemp(prefix=f".{self._beside.name}.", suffix=".samples", dir=parent)
        )
        blocks = _until_stopped(context.workload_blocks(ROWS_PER_CHUNK), self._stop)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="samples")
        self._written = self._pool.submit(
            write_workload_samples, self._private / SAMPLES_FILE, blocks
        )

    def __enter__(self) -> SharedSamples:
        if self._context is not None:
            self.start(self._context)
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
        pool, self._pool = self._pool, None
        try:
            if kind is not None:
                self._stop.set()
            pool.shutdown(wait=True)
            if kind is not None:
                return
            table = self._written.result()  # its error, if any, is the write's
            for folder in self._folders:
                link_or_copy(table, folder / SAMPLES_FILE)
                record_output_entries(folder, [SAMPLES_FILE])
        finally:
            shutil.rmtree(self._private, ignore_errors=True)
            if kind is not None:
                self._remove_created()

    def _remove_created(self) -> None:
        """The folders made above the destination, nearest first, while they are empty."""
        for folder in self._created:
            try:
                folder.rmdir()
            except OSError:
                return
