"""All-or-nothing folders: what a command writes appears together or not at all.

Every writer of a folder (a Parquet trace, a run folder, a validation report) stages its files in
a temporary folder beside the destination and moves them in only once all are written, so an
error part-way leaves no partial output and nothing already there is lost. The one choice is what
happens to a folder already at the destination: `replace=True` swaps it out whole (a trace or a
run folder is one thing), `replace=False` merges the new files into it (a report written into a
folder the user keeps other files in). A single file gets the same guarantee from
`write_file_atomically`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

__all__ = ["staged_dir", "write_file_atomically"]


@contextlib.contextmanager
def staged_dir(path: Path, *, replace: bool) -> Iterator[Path]:
    """Yield an empty staging folder; on success its content becomes `path` (see module doc).

    If moving the staged files in fails part-way, what was moved is taken out again and what was
    there is put back, so the destination is as it was.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield staging
        if not path.exists():
            os.replace(staging, path)
        elif replace:
            _swap_in(staging, path)
        else:
            _merge_in(staging, path)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _aside_folder(path: Path) -> Path:
    return Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))


def _swap_in(staging: Path, path: Path) -> None:
    aside = _aside_folder(path)
    old = aside / path.name
    try:
        os.replace(path, old)
        try:
            os.replace(staging, path)
        except BaseException:
            os.replace(old, path)
            raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def _merge_in(staging: Path, path: Path) -> None:
    aside = _aside_folder(path)
    moved_aside: list[tuple[Path, Path]] = []
    placed: list[Path] = []
    try:
        for item in sorted(staging.iterdir()):
            dest = path / item.name
            if dest.exists() or dest.is_symlink():
                kept = aside / item.name
                os.replace(dest, kept)
                moved_aside.append((dest, kept))
            os.replace(item, dest)
            placed.append(dest)
    except BaseException:
        for dest in placed:
            if dest.is_dir() and not dest.is_symlink():
                shutil.rmtree(dest, ignore_errors=True)
            else:
                dest.unlink(missing_ok=True)
        for dest, kept in moved_aside:
            os.replace(kept, dest)
        raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def write_file_atomically(path: Path, write_body: Callable[[TextIO], object]) -> None:
    """Write a text file through `write_body` into a temporary sibling, fsync it and rename it
    into place: `path` holds either its old content or the complete new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            write_body(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
