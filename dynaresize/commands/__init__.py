"""Subcommands of the CLI, one module each; every module exposes `register(app)`."""

from __future__ import annotations

import importlib

_NAMES = ["run", "calibrate", "breakeven", "sweep", "validate"]

COMMAND_MODULES = []
for _name in _NAMES:
    try:
        COMMAND_MODULES.append(importlib.import_module(f"dynaresize.commands.{_name}"))
    except ModuleNotFoundError as err:  # a subcommand whose module is not written yet
        if err.name != f"dynaresize.commands.{_name}":
            raise
