"""Turns a user's mistake into one clear line on stderr and exit code 2, with no traceback.

Packages raise their own input-error types (all subclasses of ValueError) with a message that
names the file, line or field; bugs (anything else) still raise with a full traceback.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

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


@contextlib.contextmanager
def user_errors(source: str | None = None) -> Iterator[None]:
    """Wrap a command body: input errors print one line and exit 2."""
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
        print(f"error: {message}", file=sys.stderr)
        raise typer.Exit(INPUT_ERROR_EXIT_CODE) from None
