"""The `dynaresize` command line: parses arguments and calls the packages. No logic lives here.

Each subcommand is a thin module in `dynaresize.commands` that registers itself on the app.
A mistake on the command line (an unknown option, a bad value, a missing option) is one
`error:` line naming the option, exit code 2, like every other input error of the project.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.22 carries its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer, on click itself
    from click import exceptions as click_exceptions  # type: ignore[no-redef]

from dynaresize.commands import COMMAND_MODULES

USAGE_ERROR_EXIT_CODE = 2


class _OneLineErrors(TyperGroup):
    """The app's group: parser errors become one `error:` line instead of a usage box."""

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            exit_code = super().main(args, prog_name, complete_var, False, **extra)
        except click_exceptions.NoArgsIsHelpError as err:
            # Nothing asked: the help is the answer (exit code 2, as click gives it).
            print(err.ctx.get_help() if err.ctx is not None else err.format_message())
            sys.exit(USAGE_ERROR_EXIT_CODE)
        except click_exceptions.ClickException as err:
            message = " ".join(err.format_message().split()).replace("Value error, ", "")
            print(f"error: {message}", file=sys.stderr)
            sys.exit(max(err.exit_code, USAGE_ERROR_EXIT_CODE))
        except typer.Abort:
            print("error: aborted", file=sys.stderr)
            sys.exit(1)
        sys.exit(exit_code if isinstance(exit_code, int) else 0)


app = typer.Typer(
    name="dynaresize",
    help="Model, replay and run runtime GPU resizing between Rollout and Training.",
    cls=_OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module in COMMAND_MODULES:
    _module.register(app)


if __name__ == "__main__":  # pragma: no cover
    app()
