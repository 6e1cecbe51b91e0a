"""The `dynaresize` command line: parses arguments and calls the packages. No logic lives here.

Each subcommand is a thin module in `dynaresize.commands` that registers itself on the app.
"""

from __future__ import annotations

import typer

from dynaresize.commands import COMMAND_MODULES

app = typer.Typer(
    name="dynaresize",
    help="Model, replay and run runtime GPU resizing between Rollout and Training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module in COMMAND_MODULES:
    _module.register(app)


if __name__ == "__main__":  # pragma: no cover
    app()
