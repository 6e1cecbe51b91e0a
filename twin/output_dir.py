"""All-or-nothing output folders: a command's files appear together or not at all.

Files are written to a temporary folder beside the destination and moved in once every one of
them is written, so an error part-way leaves no partial output and nothing already there is lost.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def staged_output_dir(out_dir: Path) -> Iterator[Path]:
    """Yield a staging folder; on success its files move into `out_dir` (created if needed)."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        yield staging
        if out_dir.exists():
            for item in staging.iterdir():
                os.replace(item, out_dir / item.name)
            staging.rmdir()
        else:
            os.replace(staging, out_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
