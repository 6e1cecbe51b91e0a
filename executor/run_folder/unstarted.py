"""A fresh run that fails before its first step leaves its run folder as it found it.

Until the first step is recorded, a run folder holds nothing a user can use: `config.json`,
`workers.json`, `setup.json`, empty records and perhaps a generated batch, but no step and no
checkpoint, so `--resume` has nothing to continue from. The driver notes which entries the folder
held before the run wrote anything (`entries_before`) and, when such a run fails, removes exactly
the entries the run added (`remove_added`), and the folder itself if the run created it: a retry
then starts as the first attempt did, without `--resume`. What was there before is never touched.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path


def entries_before(out: Path) -> set[str] | None:
    """The names in `out` before the run writes there; None when `out` does not exist yet."""
    if not out.is_dir():
        return None
    return {entry.name for entry in out.iterdir()}


def remove_added(out: Path, before: set[str] | None) -> None:
    """Remove what the run added to `out` since `entries_before` was taken (and `out` itself
    when it did not exist then and is empty now)."""
    if not out.is_dir():
        return
    for entry in out.iterdir():
        if before is not None and entry.name in before:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
    if before is None:
        with contextlib.suppress(OSError):  # only if empty: something else may have arrived
            out.rmdir()


def kept_nothing(out: Path) -> bool:
    """Whether the run left nothing in `out` (no folder, or an empty one)."""
    return not out.is_dir() or not any(out.iterdir())


def kept_line(out: Path) -> str:
    """The line after a run that a lost worker or a reward function stopped: what it kept."""
    if kept_nothing(out):
        return f"the run stopped before its first step and left nothing in {out}"
    return f"records and last checkpoint kept in {out}; continue with --resume"
