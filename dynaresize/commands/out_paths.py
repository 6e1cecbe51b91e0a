"""Where a command may write, checked before it computes or creates anything.

An output must never destroy an input: `--out` may not be, contain or lie inside a trace, config
or cost file the same command reads (a simulation written over the trace it was given would
replace the recorded run). Output folders follow the rules of `traces.staged_dir` (empty, new, or
marked as the project's; never the current folder, never under a file), and an output file is
replaced only if the project wrote it. Each refusal is one `OutputError` line naming the option
and the input.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from pathlib import Path

from dynaresize.traces.staged_dir import OutputError, check_output_dir, refuse_current_folder

SIDECAR_SUFFIX = ".import.json"
"""A foreign log's sidecar of facts (traces.importers): an input beside the log."""


def input_paths(*, config: str | None = None, files: Iterable[Path | None] = ()) -> list[Path]:
    """The files a command reads: the config's file (a built-in name resolves to the shipped
    file), each given path, and the importer's sidecar beside a log where there is one."""
    paths: list[Path] = []
    if config is not None:
        from dynaresize.config import resolve_config_path
        from dynaresize.config_io import ConfigError

        with contextlib.suppress(ConfigError):  # no such config: loading it says so
            paths.append(resolve_config_path(config))
    for given in files:
        if given is None:
            continue
        paths.append(Path(given))
        sidecar = Path(f"{given}{SIDECAR_SUFFIX}")
        if sidecar.is_file():
            paths.append(sidecar)
    return paths


def _refuse_overlap(out: Path, inputs: Iterable[Path], option: str) -> None:
    target = out.resolve()
    for given in inputs:
        source = given.resolve()
        if target == source:
            relation = "is"
        elif target in source.parents:
            relation = "contains"
        elif source in target.parents:
            relation = "lies inside"
        else:
            continue
        raise OutputError(
            f"{option} {out}: {relation} the input {given}; writing there would destroy it, "
            "give another output path"
        )


def check_output_folder(
    out: Path, *, inputs: Iterable[Path], replace: bool, option: str = "--out"
) -> None:
    """Refuse an output folder that overlaps an input or that the project may not write."""
    refuse_current_folder(out, label=option)
    _refuse_overlap(out, inputs, option)
    check_output_dir(out, replace=replace, label=option)


def check_output_file(
    out: Path,
    *,
    inputs: Iterable[Path],
    ours: Callable[[Path], bool],
    owner: str,
    option: str = "--out",
) -> None:
    """Refuse an output file that overlaps an input, sits under a file, is a folder, or exists
    without having been written by `owner` (`ours(path)` says whether it was)."""
    _refuse_overlap(out, inputs, option)
    for parent in reversed(out.absolute().parents):
        if parent.exists() and not parent.is_dir():
            raise OutputError(f"{option} {out}: {parent} is a file, not a folder")
    if out.is_dir():
        raise OutputError(f"{option} {out}: is a folder; name the file to write")
    if out.exists() and not ours(out):
        raise OutputError(
            f"{option} {out}: exists and was not written by {owner}; not overwritten "
            "(remove it or name another file)"
        )
