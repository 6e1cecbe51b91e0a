"""The twin's front doors: every exported name resolves to what it names, importing a package
costs nothing until a name is used, and no import order can shadow a name with a module."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from types import ModuleType

import pytest

import dynaresize.twin

PACKAGES = [
    "dynaresize.twin",
    "dynaresize.twin.calibration",
    "dynaresize.twin.analysis",
    "dynaresize.twin.sweeps",
]
HEAVY = ("pandas", "simpy", "scipy", "matplotlib", "numba")


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_is_the_object_it_names(name):
    package = importlib.import_module(name)
    assert package.__doc__ and "may import" in package.__doc__
    for export in package.__all__:
        value = getattr(package, export)
        assert not isinstance(value, ModuleType), f"{name}.{export} is a module"
        assert export in dir(package)
    with pytest.raises(AttributeError):
        package.no_such_name  # noqa: B018


def test_exported_names_survive_importing_every_module():
    """A submodule named like an export would be bound over it once imported."""
    for info in pkgutil.walk_packages(dynaresize.twin.__path__, "dynaresize.twin."):
        importlib.import_module(info.name)
    for name in PACKAGES:
        package = importlib.import_module(name)
        for export in package.__all__:
            assert not isinstance(getattr(package, export), ModuleType), f"{name}.{export}"


def test_importing_the_packages_loads_no_heavy_library():
    code = (
        "import sys\n"
        + "".join(f"import {name}\n" for name in PACKAGES)
        + f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
