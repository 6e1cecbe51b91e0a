"""`dynaresize --help` and each command's `--help` answer without importing the heavy
libraries: a user asking what a command does should not wait for pandas, SciPy or Ray. A sim
run imports only what it uses: none of the live stack, the importers or the analyses."""

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


UNUSED_BY_A_SIM_RUN = [
    "matplotlib",
    "numba",
    "scipy",
    "torch",
    "ray",
    "vllm",
    "transformers",
    "dynaresize.executor",
    "dynaresize.commands.run_live",
    "dynaresize.traces.importers",
    "dynaresize.twin.analysis",
]
"""What `run --mode sim` of a config without a live section never uses: the live stack, the
importers, the replay and break-even analyses, and the libraries only they (or plots) need."""


DEFERRED_PAST_THE_SIMULATION_START = ["pandas", "pyarrow"]
"""Used by a sim run's record tables and run-folder writers, so imported once the simulation
runs, never on the way to it (reading the config, checking the output folder)."""

_SIM_PROBE = """
import json, sys
from dynaresize.cli import app
watched = json.loads(sys.argv[1])
seen = {}

def probe(frame, event, arg):
    code = frame.f_code
    if event == "call" and code.co_name == "run_comparison" and code.co_filename.endswith(
        "comparison.py"
    ):
        seen["at_start"] = [m for m in watched if m in sys.modules]
        sys.setprofile(None)

sys.setprofile(probe)
try:
    app(args=sys.argv[2:], prog_name="dynaresize")
except SystemExit as done:
    code = done.code
loaded = [m for m in watched if any(n == m or n.startswith(m + ".") for n in sys.modules)]
print(json.dumps({"code": code, **seen, "at_end": loaded}))
"""


def test_a_sim_run_imports_only_what_it_uses_and_no_pandas_before_simulating(tmp_path):
    out = tmp_path / "run"
    command = ["run", "--mode", "sim", "--config", "example", "--steps", "20", "--out", str(out)]
    watched = [*UNUSED_BY_A_SIM_RUN, *DEFERRED_PAST_THE_SIMULATION_START, "simpy"]
    done = subprocess.run(
        [sys.executable, "-c", _SIM_PROBE, json.dumps(watched), *command],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] in (0, None), done.stderr
    assert (out / "summary.json").is_file(), "the run wrote no result folder"
    assert "at_start" in report, "the simulation never started"
    assert report["at_start"] == [], f"imported before the simulation started: {report}"
    # The run's tables do load pandas and pyarrow, later (the probe sees them); the example's
    # pipeline (one step off) runs on a plain step clock, without SimPy's event queue; nothing
    # of the live stack, the importers or the analyses.
    assert report["at_end"] == DEFERRED_PAST_THE_SIMULATION_START, report
