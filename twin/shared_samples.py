"""The workload's samples table of a run folder: written once, beside the rest, and linked into
every folder that shows a run without samples of its own.

At a million steps that table has over 10^8 rows and takes longer to encode than every other
file of the folder; the encoder (pyarrow) lets go of the interpreter while it works, so the
table is written on a thread of its own. It depends on the workload alone: fed the blocks of
the workload as the run's context draws them (`block_sink`), it is encoded on the second core
while the context is built and the policies simulated, and the workload is drawn once (numpy's
draws hold the interpreter: a second draw beside the simulation would slow it by as much).
Where the context was not drawn here (a kept one), `start` draws the workload again on the
writer's thread. It is written into a private folder beside the destination (each writer of a
folder may replace its staging folder whole until it is done), linked into place
(`link_or_copy`) once the folders that hold it are written, and the private folder is removed
on the way out, failure or not; a failure stops the writing thread at its next row group.
"""

from __future__ import annotations

import queue
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from dynaresize.traces.staged_dir import output_errors, record_output_entries
from dynaresize.traces.workload import Workload

from .block_costs import BlockSink, holds_samples
from .config import ScenarioConfig
from .simulation import SimContext

__all__ = ["SAMPLES_FILE", "SharedSamples", "WritingStopped"]

SAMPLES_FILE = "samples.parquet"

T = TypeVar("T")


_FED_BLOCKS = 8
"""Blocks handed over and not yet written, at most (about 64 MB each): enough that the context
rarely waits for the encoder (which takes somewhat longer than the draws, and catches up while
the policies are simulated), few enough that the workload is never held whole."""
_WAIT_S = 0.05
"""How often a wait on the feed looks whether the run failed or the writer stopped."""
_END = object()
"""The end of the feed."""


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
        self._fed: queue.Queue | None = None
        """Blocks on their way to the writer, while `build_context` hands them over."""

    @property
    def started(self) -> bool:
        return self._written is not None

    def start(self, context: SimContext) -> None:
        """Write the samples table of `context`'s workload (once; not if not needed): end the
        feed of blocks where there was one (the context saw them all), else draw them again."""
        from dynaresize.traces.parquet_io import ROWS_PER_CHUNK

        if self._fed is not None:
            self._hand_over(_END)
            self._fed = None
        if self._written is not None or not self._needed:
            return
        self._context = context
        self._begin(_until_stopped(context.workload_blocks(ROWS_PER_CHUNK), self._stop))

    def block_sink(self, config: ScenarioConfig | None = None) -> BlockSink | None:
        """What to give `build_context` (its `block_sink`) so that the table is written from
        the blocks it draws; None where no table is needed (nor then written), as for runs of
        `config` that keep samples of their own (`holds_samples`). `start` ends the feed."""
        if config is not None and holds_samples(config):
            self._needed = False
        if not self._needed or self._written is not None:
            return None
        return self._take_block

    def _take_block(self, first: int, block: Workload) -> None:
        if self._fed is None:
            self._fed = queue.Queue(maxsize=_FED_BLOCKS)
            self._begin(self._fed_blocks(self._fed))
        self._hand_over((first, block))

    def _hand_over(self, item: object) -> None:
        """Queue `item` for the writer, waiting while it is busy; a writer that has stopped
        (failed) takes nothing more, and its error is raised where the table is linked."""
        assert self._fed is not None and self._written is not None
        while not self._written.done():
            try:
                self._fed.put(item, timeout=_WAIT_S)
                return
            except queue.Full:
                continue

    def _fed_blocks(self, fed: queue.Queue) -> Iterator[tuple[int, Workload]]:
        """The blocks handed over, until the end of the feed or a failure of the run."""
        while True:
            try:
                item = fed.get(timeout=_WAIT_S)
            except queue.Empty:
                if self._stop.is_set():
                    raise WritingStopped from None
                continue
            if item is _END:
                return
            if self._stop.is_set():
                raise WritingStopped
            yield item

    def _begin(self, blocks: Iterable[tuple[int, Workload]]) -> None:
        """Start the writer's thread on `blocks`, into a new private folder."""
        from dynaresize.traces.workload_parquet import write_workload_samples

        parent = self._beside.parent
        self._created = [p for p in [parent, *parent.parents] if not p.exists()]
        with output_errors(self._beside):  # a full or read-only disk: one error naming --out
            parent.mkdir(parents=True, exist_ok=True)
            self._private = Path(
                tempfile.mkdtemp(prefix=f".{self._beside.name}.", suffix=".samples", dir=parent)
            )
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
            if kind is not None or self._fed is not None:  # failed, or a feed never ended
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
