"""All-or-nothing output folders that never touch what the project did not write.

Every writer of a folder (a Parquet trace, a run folder, a validation report) stages its files in
a temporary folder beside the destination and moves them in only once all are written, so an
error part-way leaves no partial output and nothing already there is lost. The one choice is what
happens to a folder already at the destination: `replace=True` swaps it out whole (a trace or a
run folder is one thing), `replace=False` merges the new files into it (a report written into a
run folder). A single file gets the same guarantee from `write_file_atomically`.

Every folder written this way carries a marker file, `OUTPUT_MARKER`, listing the entries the
project put there. An existing destination is written to only if it is empty or carries the
marker, and only entries the marker lists are ever replaced: a user's folder, or a file a user
added to a run folder, is never deleted or overwritten. `check_output_dir` applies these rules
up front, so a command can refuse a destination before it computes anything. A failure to write
(a full or read-only file system, a file where a folder is needed) is an `OutputError` naming
the destination.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TextIO

from dynaresize.config_io import ConfigError

__all__ = [
    "OUTPUT_MARKER",
    "OutputError",
    "check_output_dir",
    "claim_output_dir",
    "is_project_output",
    "output_errors",
    "record_output_entries",
    "refuse_current_folder",
    "staged_dir",
    "write_file_atomically",
]

OUTPUT_MARKER = ".dynaresize-output.json"
"""File in every output folder the project writes: what wrote it and which entries are its."""

_WRITE_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EROFS,
        errno.EDQUOT,
        errno.EFBIG,
        errno.EACCES,
        errno.EPERM,
        errno.EIO,
        errno.ENOTDIR,
        errno.EEXIST,
        errno.ENAMETOOLONG,
        errno.EBUSY,
    }
)
"""OS errors that mean "cannot write there" rather than a bug or a missing input."""


class OutputError(ConfigError):
    """An output path the project will not or cannot write: names the path and the reason."""


# --- the marker ----------------------------------------------------------------------------


def _marked_entries(folder: Path) -> set[str] | None:
    """Entries the marker of `folder` lists as the project's, or None without a (valid) marker."""
    marker = folder / OUTPUT_MARKER
    try:
        raw = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("written_by") != "dynaresize":
        return None
    entries = raw.get("entries", [])
    if not isinstance(entries, list):
        return None
    return {str(e) for e in entries}


def is_project_output(folder: Path) -> bool:
    """True if `folder` carries the marker of a folder the project wrote."""
    return _marked_entries(folder) is not None


def _write_marker(folder: Path, entries: Iterable[str]) -> None:
    names = sorted({str(e) for e in entries} - {OUTPUT_MARKER})
    document = {"written_by": "dynaresize", "entries": names}
    (folder / OUTPUT_MARKER).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


# --- what may be written where ---------------------------------------------------------------


def _first_non_folder_ancestor(path: Path) -> Path | None:
    for parent in reversed(path.absolute().parents):
        if parent.exists() and not parent.is_dir():
            return parent
    return None


def refuse_current_folder(path: Path, *, label: str = "--out") -> None:
    """The folder a command runs in, or one holding it, is never an output folder: replacing
    it would pull the ground from under the user's shell and files."""
    here = Path.cwd().resolve()
    resolved = Path(path).resolve()
    if resolved == here or resolved in here.parents:
        where = f"{label} {path}" if label else str(path)
        raise OutputError(
            f"{where}: is the current folder or holds it; name a new folder for the output"
        )


def check_output_dir(path: Path, *, replace: bool = True, label: str = "--out") -> None:
    """Raise OutputError unless the project may write its output folder at `path`.

    Refused: the current folder or one holding it, a path under an existing file, an existing
    file, and an existing folder that is neither empty nor marked as the project's. A marked
    folder is refused too when something not listed in its marker would be replaced: with
    `replace=True`, any unlisted entry (the whole folder is swapped out).
    """
    path = Path(path)
    where = f"{label} {path}" if label else str(path)
    refuse_current_folder(path, label=label)
    blocker = _first_non_folder_ancestor(path)
    if blocker is not None:
        raise OutputError(f"{where}: {blocker} is a file, not a folder")
    if path.is_symlink() and not path.exists():
        raise OutputError(f"{where}: is a broken symbolic link")
    if not path.exists():
        return
    if not path.is_dir():
        raise OutputError(f"{where}: exists and is not a folder")
    present = {p.name for p in path.iterdir()}
    if not present:
        return
    listed = _marked_entries(path)
    if listed is None:
        first = sorted(present)[0]
        raise OutputError(
            f"{where}: the folder holds files dynaresize did not write (e.g. {first}); "
            "give a new or empty folder"
        )
    if replace:
        foreign = sorted(present - listed - {OUTPUT_MARKER})
        if foreign:
            raise OutputError(
                f"{where}: {foreign[0]} in this earlier output was not written by dynaresize "
                "and would be lost; move it or give a new folder"
            )


def _check_merge_names(path: Path, names: Iterable[str], label: str) -> None:
    """Refuse a merge that would overwrite an entry the folder's marker does not list."""
    listed = _marked_entries(path) or set()
    for name in sorted(names):
        if name != OUTPUT_MARKER and name not in listed and (path / name).exists():
            raise OutputError(
                f"{label} {path}: {name} there was not written by dynaresize; not overwritten"
            )


@contextlib.contextmanager
def output_errors(path: Path, *, label: str = "--out") -> Iterator[None]:
    """Turn an OS error that means "cannot write here" into an OutputError naming `path`."""
    try:
        yield
    except OutputError:
        raise
    except OSError as err:
        if err.errno not in _WRITE_ERRNOS:
            raise
        reason = err.strerror or str(err)
        where = f"{label} {path}" if label else str(path)
        raise OutputError(f"{where}: cannot write there ({reason})") from None


def claim_output_dir(path: Path, *, label: str = "--out") -> bool:
    """Create `path` as a marked output folder, or check an existing one may be written to.

    For writers that fill a folder over time (a sweep's cache). Returns True if the folder was
    created here (the caller may remove it whole if it fails before writing anything of value).
    """
    path = Path(path)
    check_output_dir(path, replace=False, label=label)
    with output_errors(path, label=label):
        if path.exists():
            if not is_project_output(path):
                _write_marker(path, [])
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        try:
            _write_marker(staging, [])
            _use_umask_permissions(staging)
            os.replace(staging, path)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        return True


def record_output_entries(path: Path, names: Iterable[str]) -> None:
    """Add `names` to the marker of the project's folder `path` (entries written in place)."""
    _write_marker(path, (_marked_entries(path) or set()) | set(names))


# --- staging -------------------------------------------------------------------------------


def _use_umask_permissions(folder: Path) -> None:
    """mkdtemp makes a folder only its owner can read; an output folder gets the usual mode."""
    os.chmod(folder, 0o777 & ~_current_umask())


@contextlib.contextmanager
def staged_dir(path: Path, *, replace: bool, label: str = "--out") -> Iterator[Path]:
    """Yield an empty staging folder; on success its content becomes `path` (see module doc).

    If moving the staged files in fails part-way, what was moved is taken out again and what was
    there is put back, so the destination is as it was. `label` names the option the path came
    from in error messages.
    """
    path = Path(path)
    check_output_dir(path, replace=replace, label=label)
    with output_errors(path, label=label):
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        try:
            try:
                yield staging
            except OutputError as err:
                # A writer nested inside (one staging its own files into ours) names our
                # staging folder; the user knows only the destination.
                raise OutputError(str(err).replace(str(staging), str(path))) from None
            check_output_dir(path, replace=replace, label=label)  # it may have changed since
            new_names = [p.name for p in staging.iterdir()]
            if not path.exists():
                _write_marker(staging, new_names)
                _use_umask_permissions(staging)
                os.replace(staging, path)
            elif replace:
                _write_marker(staging, new_names)
                _use_umask_permissions(staging)
                _swap_in(staging, path)
            else:
                _check_merge_names(path, new_names, label)
                listed = _marked_entries(path) or set()
                _write_marker(staging, listed | set(new_names))
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


def write_file_atomically(
    path: Path, write_body: Callable[[TextIO], object], *, label: str = ""
) -> None:
    """Write a text file through `write_body` into a temporary sibling, fsync it and rename it
    into place: `path` holds either its old content or the complete new one, never a part.
    An OS error that means the file cannot be written there is an OutputError naming `path`
    (after `label`, the option it came from, if given)."""
    path = Path(path)
    where = f"{label} {path}" if label else str(path)
    with output_errors(path, label=label):
        blocker = _first_non_folder_ancestor(path)
        if blocker is not None:
            raise OutputError(f"{where}: {blocker} is a file, not a folder")
        if path.is_dir():
            raise OutputError(f"{where}: is a folder, not a file")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                write_body(f)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_current_umask())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def _current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask
