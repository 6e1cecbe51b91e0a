"""The first policy's files, put into its own folder under policies/ of a run folder.

The first policy's tables and traces head the run folder and fill its policy folder too: linked
there rather than validated and written twice (a million steps' tables are hundreds of MB).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

__all__ = ["copy_run_files"]


def _linked(name: str) -> bool:
    """Files of a run folder written once and never again while the folder is staged: the
    tables and the Chrome trace (summary.json, for one, is rewritten with every policy's)."""
    return name.endswith(".parquet") or name == "trace.json"


def copy_run_files(source: Path, folder: Path, *, leave_out: Sequence[str]) -> None:
    """Every file directly in `source` but those named, put into a new `folder`: the large ones
    as hard links where the file system allows (else copies), the rest copied."""
    from dynaresize.traces.parquet_io import link_or_copy

    folder.mkdir(parents=True)
    for item in source.iterdir():
        if not item.is_file() or item.name in leave_out:
            continue
        if _linked(item.name):
            link_or_copy(item, folder / item.name)
        else:
            shutil.copy2(item, folder / item.name)
