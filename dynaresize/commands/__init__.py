"""Subcommands of the CLI, one module each; every module exposes `register(app)`."""

from __future__ import annotations

from . import breakeven, calibrate, run, sweep, validate

COMMAND_MODULES = [run, calibrate, breakeven, sweep, validate]
