"""Front doors loaded on first use.

A package's `__init__` names what it exports and the submodule each name lives in; the submodule
is imported when a name is first read. Importing a package therefore costs nothing until it is
used, which keeps the command line's start (and `--help`) free of pandas, SimPy, SciPy and
matplotlib. A front-door name never equals a submodule's name: the import system would bind the
submodule over it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module
from types import ModuleType
from typing import Any


def lazy_exports(
    package: str, exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module-level `__getattr__` and `__dir__` for `package`, exporting `name -> submodule`."""

    def __getattr__(name: str) -> Any:
        submodule = exports.get(name)
        if submodule is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{submodule}"), name)
        setattr(sys.modules[package], name, value)  # later reads skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__


class LazyModule:
    """A library module imported on first attribute read: `pd = LazyModule("pandas")` at the top
    of a module whose import should not load pandas (the command line's path to the simulation)
    while its functions still write `pd.DataFrame`. Type checkers see the real import instead
    (`if TYPE_CHECKING: import pandas as pd` / `else: pd = LazyModule("pandas")`)."""

    __slots__ = ("_module", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        if self._module is None:
            self._module = import_module(self._name)
        return getattr(self._module, attribute)

    def __repr__(self) -> str:
        return f"LazyModule({self._name!r})"
