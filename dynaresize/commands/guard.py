"""Turns a user's mistake into one clear line on stderr and exit code 2, with no traceback.

Packages raise their own input-error types (all subclasses of ValueError) with a message that
names the file, line or field; bugs (anything else) still raise with a full traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import typer
from pydantic import ValidationError

INPUT_ERROR_EXIT_CODE = 2


def input_error_types() -> tuple[type[BaseException], ...]:
    """Exception types that mean bad input: the packages' own, and missing files.

    Imported when a command runs, not when the command line is built: `--help` stays light.
    """
    from dynaresize.config_io import ConfigError
    from dynaresize.traces.errors import TraceError

    return (FileNotFoundError, IsADirectoryError, ValidationError, ConfigError, TraceError)


def name_the_file(message: str, about: Sequence[str | os.PathLike[str] | None]) -> str:
    """`message`, prefixed with the first of `about` (the files given on the command line,
    main input first) unless it already names one of them or is about an option (`--x ...`):
    a user with several inputs must know which one an error is about."""
    given = [str(a) for a in about if a is not None]
    if not given or message.startswith("--"):
        return message
    for name in given:
        # A bare file name counts only if it has an extension: "trace" is also a word.
        base = Path(name).name
        if name in message or ("." in base and base in message):
            return message
    return f"{given[0]}: {message}"


@contextlib.contextmanager
def user_errors(
    source: str | None = None, *, about: Sequence[str | os.PathLike[str] | None] = ()
) -> Iterator[None]:
    """Wrap a command body: input errors print one line and exit 2. `source` names the config
    in pydantic's messages; `about` lists the files given on the command line, main input
    first, so that every error line names the one it is about (see `name_the_file`)."""
    try:
        yield
    except input_error_types() as err:
        if isinstance(err, ValidationError):
            from dynaresize.config_io import format_validation_error

            message = format_validation_error(err, source)
        elif isinstance(err, FileNotFoundError):
            message = f"file not found: {err.filename or err}"
        else:
            message = str(err)
        message = " ".join(name_the_file(message, about).split())
        print(f"error: {message}", file=sys.stderr)
        raise typer.Exit(INPUT_ERROR_EXIT_CODE) from None
