"""All-or-nothing folders: what a command writes appears together or not at all.

Every writer of a folder (a Parquet trace, a run folder, a validation report) stages its files in
a temporary folder beside the destination and moves them in only once all are written, so an
error part-way leaves no partial output and nothing already there is lost. The one choice is what
happens to a folder already at the destination: `replace=True` swaps it out whole (a trace or a
run folder is one thing), `replace=False` merges the new files into it (a report written into a
folder the user keeps other files in).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["staged_dir"]


@contextlib.contextmanager
def staged_dir(path: Path, *, replace: bool) -> Iterator[Path]:
    """Yield an empty staging folder; on success its content becomes `path` (see module doc)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield staging
        if not path.exists():
            os.replace(staging, path)
        elif replace:
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
            os.replace(staging, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            for item in staging.iterdir():
                os.replace(item, path / item.name)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
