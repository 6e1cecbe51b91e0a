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
    """Exception types that mean bad input, collected from the packages that define them."""
    types: list[type[BaseException]] = [FileNotFoundError, IsADirectoryError, ValidationError]
    for module, name in [
        ("dynaresize.config_io", "ConfigError"),
        ("dynaresize.traces.errors", "TraceError"),
    ]:
        with contextlib.suppress(ImportError, AttributeError):
            mod = __import__(module, fromlist=[name])
            types.append(getattr(mod, name))
    return tuple(types)


@contextlib.contextmanager
def user_errors(source: str | None = None) -> Iterator[None]:
    """Wrap a command body: input errors print one line and exit 2."""
    try:
        yield
    except input_error_types() as err:
        if isinstance(err, ValidationError):
            # Imported on error only: the twin's config module is slow to import.
            from dynaresize.config_io import format_validation_error

            message = format_validation_error(err, source)
        elif isinstance(err, FileNotFoundError):
            message = f"file not found: {err.filename or err}"
        else:
            message = str(err)
        print(f"error: {message}", file=sys.stderr)
        raise typer.Exit(INPUT_ERROR_EXIT_CODE) from None
