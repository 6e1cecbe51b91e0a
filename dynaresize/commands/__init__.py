"""Subcommands of the CLI, one module each; every module exposes `register(app)`.

Commands may import every package of the project; they resolve config names and option
combinations, then call the packages' front doors.
"""

from __future__ import annotations

from . import breakeven, calibrate, run, sweep, validate

COMMAND_MODULES = [run, calibrate, breakeven, sweep, validate]
