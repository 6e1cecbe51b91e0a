"""Which optional parts of the distribution are installed, checked before a command needs them.

The twin installs with the core dependencies only; the live executor needs the `live` extra
(torch, ray, transformers). A command that needs an extra checks for it first, so a user sees one
line naming the extra and the install command, not an ImportError from deep inside a run.
"""

from __future__ import annotations

import importlib.util

from dynaresize.config_io import ConfigError

LIVE_EXTRA_MODULES = ("torch", "ray", "transformers")
"""Top-level modules the `live` extra brings."""


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    """The modules of `modules` that cannot be found (without importing any of them)."""
    return [name for name in modules if importlib.util.find_spec(name) is None]


def require_live_extra(needed_by: str) -> None:
    """Raise one ConfigError naming the `live` extra when any of its modules is missing."""
    missing = missing_modules(LIVE_EXTRA_MODULES)
    if missing:
        raise ConfigError(
            f"{needed_by} needs the `live` extra ({', '.join(missing)} not installed): "
            "pip install 'dynaresize[live]'"
        )
