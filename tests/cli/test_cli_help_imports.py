"""`dynaresize --help` and each command's `--help` answer without importing the heavy
libraries: a user asking what a command does should not wait for pandas, SciPy or Ray."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ["matplotlib", "numba", "scipy", "simpy", "torch", "ray", "pandas"]

_PROBE = """
import json, sys
from dynaresize.cli import app
try:
    app(args=sys.argv[2:], prog_name="dynaresize")
except SystemExit as done:
    code = done.code
heavy = [m for m in json.loads(sys.argv[1]) if m in sys.modules]
print(json.dumps({"code": code, "heavy": heavy}))
"""


@pytest.mark.parametrize(
    "command", [[], ["run"], ["calibrate"], ["breakeven"], ["sweep"], ["validate"]]
)
def test_help_imports_none_of_the_heavy_libraries(command):
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(HEAVY), *command, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] == 0
    assert report["heavy"] == [], f"dynaresize {' '.join(command)} --help imported {report}"
