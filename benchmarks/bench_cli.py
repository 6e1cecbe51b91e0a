"""Where the time of a small command goes: `dynaresize run --mode sim --config example`.

The command runs in a fresh process (as a user runs it) with timers around its parts, and the
benchmark prints the split, least CPU seconds over several runs (this machine is shared, so wall
time mostly measures the neighbours; CPU time is what an idle core would show). The project's
bytecode is written by the first run (kept apart) and read by the others, as in any checkout or
install; an environment that forbids writing it would time the compiler on every run.

- `interpreter_s`: Python's own start, before any project code;
- `cli_import_s`: importing the command line (what `--help` costs);
- `load_config_s`: reading and validating the config;
- `simulation_imports_s`: importing the simulation's code and what it runs on before it starts
  (numpy, SimPy, pydantic; no pandas or pyarrow: `deferred_at_simulation_start` lists which of
  those were loaded by then);
- `other_imports_s`: the rest of what the command imports before the simulation (the
  comparison, the table printer);
- `pandas_import_s`: pandas, with the pyarrow it loads, imported where the simulation first
  uses it (its record tables), timed apart;
- `simulation_s`: `run_comparison`, every policy and static split and the offline optimum,
  including the rollout kernel it loads on first use, not `pandas_import_s`;
- `write_s`: the run folder, split into `write_tables_s` (Parquet trace tables),
  `write_chrome_trace_s`, `write_timeline_s` (timeline.svg) and the rest;
- `print_table_s`: the table on the terminal;
- `inside_simulation_s` (`simulation_s + simulation_imports_s + pandas_import_s`) and
  `outside_simulation_s` (everything else); `outside_simulation_strict_s` counts every import
  as outside;
- `total_s`: the whole command; target at most `TARGET_TOTAL_S`.

Also `library_imports_s`: a fresh process that only imports the libraries the command runs on
(numpy, pandas, pyarrow's Parquet writer, pydantic with one model, PyYAML, typer, rich; not
SimPy, which the example's one-step-off pipeline does not use), the part of `total_s` no change
to the project short of leaving pandas out can take away, run right after each command run;
`project_share_s`: the median over those pairs of the command's total less the libraries' (what
the project's own code costs, steadier than either on a busy machine); `library_split_s`:
each of those libraries imported alone (the floor, library by library); `help_s`: `dynaresize
--help` in a fresh process; and the heavy libraries and project packages each has imported (the
command: by the time the simulation starts) that it does not use.

Before the run folder's picture became timeline.svg (and SciPy an import of the one function
that needs it), the same measurement gave 3.41 s in all: 0.70 s simulating and 1.11 s drawing
timeline.png with matplotlib, most of it importing matplotlib.

    python benchmarks/bench_cli.py [--repeats 5]   # prints, writes benchmarks/results/cli.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_TOTAL_S = 1.2
HEAVY = ["matplotlib", "numba", "scipy", "simpy", "torch", "ray", "pandas"]
UNUSED_BY_SIM = ["matplotlib", "numba", "scipy", "torch", "ray", "vllm", "transformers"]
UNUSED_PROJECT = [
    "dynaresize.executor",
    "dynaresize.commands.run_live",
    "dynaresize.traces.importers",
    "dynaresize.twin.analysis",
]
"""What a sim run of a config without a live section does not use, before or after it starts."""
DEFERRED = ["pandas", "pyarrow"]
"""What the simulation's records and the run folder's writers use, but nothing before the
simulation starts: imported on first use."""

_CHILD = r"""
import json, sys, time
from contextlib import redirect_stdout
import io

cpu = {"interpreter_s": time.process_time()}
unused = json.loads(sys.argv[2])
deferred = json.loads(sys.argv[3])

def timed(owner, name, key):
    inner = getattr(owner, name)
    def wrapper(*args, **kwargs):
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            cpu[key] = cpu.get(key, 0.0) + time.process_time() - start
    setattr(owner, name, wrapper)

start = time.process_time()
import dynaresize.cli as cli
cpu["cli_import_s"] = time.process_time() - start

start = time.process_time()
import dynaresize.twin.simulation
cpu["simulation_imports_s"] = time.process_time() - start

start = time.process_time()
import dynaresize.config as config_module
import dynaresize.twin as twin
import dynaresize.commands.table as table
import dynaresize.twin.comparison as comparison
cpu["other_imports_s"] = time.process_time() - start

timed(config_module, "load_run_config", "load_config_s")
timed(comparison, "write_chrome_trace", "write_chrome_trace_s")
timed(table, "print_table", "print_table_s")
twin.run_comparison = comparison.run_comparison
twin.write_comparison = comparison.write_comparison
timed(twin, "run_comparison", "simulation_s")
timed(twin, "write_comparison", "write_s")

def loaded(names):
    return sorted({n for n in names for m in sys.modules if m == n or m.startswith(n + ".")})

simulate = twin.run_comparison
def at_start(*args, **kwargs):
    cpu["unused_at_simulation_start"] = loaded(unused)
    cpu["deferred_at_simulation_start"] = loaded(deferred)
    # The simulation's records are pandas tables: pandas (with the numpy and pyarrow it loads)
    # is imported here, on its first use, and timed as a part of its own.
    start = time.process_time()
    import pandas
    cpu["pandas_import_s"] = time.process_time() - start
    return simulate(*args, **kwargs)
twin.run_comparison = at_start

write = twin.write_comparison
def writers_timed(*args, **kwargs):
    # the table and timeline writers load pandas: imported once the simulation is done
    import dynaresize.traces.io as trace_io
    import dynaresize.traces.timeline_svg as timeline_svg
    timed(trace_io, "write_trace", "write_tables_s")
    timed(timeline_svg, "write_timeline_svg", "write_timeline_s")
    return write(*args, **kwargs)
twin.write_comparison = writers_timed

code = 0
with redirect_stdout(io.StringIO()):
    try:
        cli.app(args=["run", "--mode", "sim", "--config", "example", "--out", sys.argv[1]],
                prog_name="dynaresize")
    except SystemExit as done:
        code = done.code or 0
cpu["total_s"] = time.process_time()
cpu["unused_at_end"] = loaded(unused)
cpu["exit_code"] = code
print(json.dumps(cpu))
"""

_HELP = r"""
import json, sys, time
from contextlib import redirect_stdout
import io
with redirect_stdout(io.StringIO()):
    try:
        from dynaresize.cli import app
        app(args=["--help"], prog_name="dynaresize")
    except SystemExit:
        pass
heavy = [m for m in json.loads(sys.argv[1]) if m in sys.modules]
print(json.dumps({"help_s": time.process_time(), "heavy_imported": heavy}))
"""

_LIBRARIES = r"""
import json, time
import numpy, pandas, pyarrow.parquet, pydantic, yaml, typer, rich.console, rich.table

class One(pydantic.BaseModel):
    value: int = 0

One(value=1)
print(json.dumps({"library_imports_s": time.process_time()}))
"""


LIBRARY_IMPORTS = {
    "numpy": "import numpy",
    "pandas (with the numpy and pyarrow it loads)": "import pandas",
    "pyarrow.parquet": "import pyarrow.parquet",
    "pydantic (one model)": "import pydantic\nclass One(pydantic.BaseModel):\n    value: int = 0",
    "simpy": "import simpy",
    "yaml": "import yaml",
    "typer": "import typer",
    "rich": "import rich.console, rich.table",
}
"""Each library the command runs on, imported alone in a fresh process: where the floor is."""

_ONE_LIBRARY = r"""
import json, sys, time
start = time.process_time()
exec(sys.argv[1])
print(json.dumps({"import_s": time.process_time() - start}))
"""


def library_split(repeats: int) -> dict[str, float]:
    """Least CPU seconds over `repeats` fresh processes to import each library alone (the
    interpreter's own start excluded); they overlap (pandas loads numpy and pyarrow)."""
    return {
        name: round(min(_child(_ONE_LIBRARY, code)["import_s"] for _ in range(repeats)), 3)
        for name, code in LIBRARY_IMPORTS.items()
    }


def _child(script: str, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(repeats: int) -> dict:
    runs, libraries = [], []
    unused = json.dumps(UNUSED_BY_SIM + UNUSED_PROJECT)
    deferred = json.dumps(DEFERRED)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats + 1):  # the first may compile or load caches: kept apart
            figures = _child(_CHILD, str(Path(tmp) / f"run{i}"), unused, deferred)
            assert figures.pop("exit_code") == 0, figures
            runs.append(figures)
            # right after each run, under the same load: the libraries alone
            libraries.append(_child(_LIBRARIES)["library_imports_s"])
    first, rest = runs[0], runs[1:]
    shares = sorted(r["total_s"] - lib for r, lib in zip(rest, libraries[1:], strict=True))
    best = min(rest, key=lambda r: r["total_s"])
    best["write_other_s"] = best["write_s"] - sum(
        best.get(k, 0.0) for k in ("write_tables_s", "write_chrome_trace_s", "write_timeline_s")
    )
    inside = best["simulation_s"] + best["simulation_imports_s"] + best["pandas_import_s"]
    best["outside_simulation_s"] = best["total_s"] - inside
    best["inside_simulation_s"] = inside
    best["outside_simulation_strict_s"] = best["total_s"] - best["simulation_s"]
    best["first_run_total_s"] = first["total_s"]
    best["library_imports_s"] = min(libraries[1:])
    best["project_share_s"] = shares[len(shares) // 2]
    helps = [_child(_HELP, json.dumps(HEAVY)) for _ in range(repeats)]
    best["help_s"] = min(h["help_s"] for h in helps)
    best["help_heavy_imports"] = helps[0]["heavy_imported"]
    best["library_split_s"] = library_split(repeats)
    best["load_average_1min"] = round(os.getloadavg()[0], 2)
    return best


ORDER = [
    "interpreter_s",
    "cli_import_s",
    "simulation_imports_s",
    "other_imports_s",
    "load_config_s",
    "pandas_import_s",
    "simulation_s",
    "write_s",
    "write_tables_s",
    "write_chrome_trace_s",
    "write_timeline_s",
    "write_other_s",
    "print_table_s",
    "total_s",
    "inside_simulation_s",
    "outside_simulation_s",
    "outside_simulation_strict_s",
    "first_run_total_s",
    "library_imports_s",
    "project_share_s",
    "help_s",
]


def report(figures: dict, repeats: int) -> str:
    lines = [
        "# `dynaresize run --mode sim --config example`: where the time goes",
        "",
        f"CPU seconds, least of {repeats} runs in fresh processes "
        f"(`python benchmarks/bench_cli.py`; 1-minute load average {figures['load_average_1min']}"
        " at the end).",
        "",
        "| part | CPU s |",
        "|---|---|",
    ]
    lines += [f"| {key} | {figures[key]:.3f} |" for key in ORDER if key in figures]
    total, inside = figures["total_s"], figures["inside_simulation_s"]
    verdict = "met" if total <= TARGET_TOTAL_S else "NOT met"
    lines += [
        "",
        f"In all {total:.3f} s: target (at most {TARGET_TOTAL_S} s) {verdict}. Inside the "
        f"simulation {inside:.3f} s (its imports {figures['simulation_imports_s']:.3f} s, "
        f"pandas on first use {figures['pandas_import_s']:.3f} s, "
        f"simulating {figures['simulation_s']:.3f} s), outside it "
        f"{figures['outside_simulation_s']:.3f} s. Importing the libraries alone takes "
        f"{figures['library_imports_s']:.3f} s in a fresh process; the project's own share "
        f"(median of the command less the libraries, run after one another) is "
        f"{figures['project_share_s']:.3f} s.",
        "Imported by the time the simulation starts, of what a sim run does not use "
        f"({', '.join(UNUSED_BY_SIM + UNUSED_PROJECT)}): "
        f"{', '.join(figures['unused_at_simulation_start']) or 'none'}; by the end: "
        f"{', '.join(figures['unused_at_end']) or 'none'}. Of {', '.join(DEFERRED)} (used "
        "once the simulation runs), imported before it starts: "
        f"{', '.join(figures['deferred_at_simulation_start']) or 'none'}.",
        f"`dynaresize --help` imports of {', '.join(HEAVY)}: "
        f"{', '.join(figures['help_heavy_imports']) or 'none'}.",
        "",
        "Each library alone (fresh process, least CPU s, interpreter start excluded; they "
        "overlap):",
        "",
        "| library | import CPU s |",
        "|---|---|",
    ]
    lines += [f"| {name} | {sec:.3f} |" for name, sec in figures["library_split_s"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    figures = measure(args.repeats)
    text = report(figures, args.repeats)
    print(text)
    if not args.no_write:
        results = ROOT / "benchmarks" / "results"
        (results / "cli.json").write_text(json.dumps(figures, indent=2) + "\n")
        (results / "cli.md").write_text(text)


if __name__ == "__main__":
    main()
