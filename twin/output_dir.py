"""All-or-nothing output folders for reports: files appear together or not at all, merged into
a folder that already exists (the mechanism is `traces.staged_dir`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from dynaresize.traces.staged_dir import staged_dir


@contextlib.contextmanager
def staged_output_dir(out_dir: Path) -> Iterator[Path]:
    """Yield a staging folder; on success its files move into `out_dir` (created if needed)."""
    with staged_dir(out_dir, replace=False) as staging:
        yield staging
