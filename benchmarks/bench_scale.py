"""How the twin's cost grows with the number of steps: simulate and replay at 10k, 100k and 1M.

For each size N, two commands as a user runs them, each in a fresh process of its own:

- simulate: `dynaresize run --mode sim --config example --steps N --out DIR` (both policies of
  the example, every static split, the offline optimum, and every file of the run folder);
- replay: `dynaresize run --mode replay --config example --trace DIR --out DIR2`, the trace the
  simulation wrote (the replay reads it, re-simulates the config's policies on its workload and
  writes its folder).

Each process is waited for on its own (`os.wait4`), so its CPU seconds and its peak resident
memory are its own, not the largest of every child so far. Figures: wall seconds, CPU seconds,
peak RSS, and CPU milliseconds per step (flat when the cost is linear in the steps).

A size is skipped, with the reason in the table, when the twin refuses it (its per-run limits,
checked here before anything starts), when its simulation was skipped (a replay needs its
trace), or when the peak memory measured at the smaller sizes, extended linearly, would exceed
`MEMORY_SHARE` of the memory this machine has available at that moment.

    python benchmarks/bench_scale.py [--steps 10000 100000 1000000] [--timeout-s 3600]

Prints the figures and writes benchmarks/results/scale.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CONFIG = "example"
DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
MEMORY_SHARE = 0.8
"""Share of the available memory a size may be predicted to need (the machine is shared)."""
COMMANDS = ("simulate", "replay")


def memory_bytes(field: str = "MemAvailable") -> int | None:
    """A field of /proc/meminfo (Linux) in bytes, or None where there is none."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def refusal(steps: int) -> str | None:
    """The twin's own error for a run of `steps` steps of the config, or None if it takes it:
    asked of this tree's twin, the one the measured commands run."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from dynaresize.config import load_run_config
    from dynaresize.config_io import ConfigError

    try:
        load_run_config(CONFIG, overrides={"simulation": {"num_steps": steps}})
    except ConfigError as err:
        return str(err).split(": ", 1)[-1]
    return None


def predicted_peak_bytes(done: list[dict], steps: int) -> float | None:
    """Peak RSS at `steps`, extended linearly from the measured sizes (through the origin from
    one size, which overestimates: part of the memory does not grow with the steps)."""
    points = sorted((r["steps"], r["peak_rss_mb"] * 2**20) for r in done if "peak_rss_mb" in r)
    if not points:
        return None
    if len(points) == 1:
        (n, peak) = points[0]
        return peak * steps / n
    (n0, p0), (n1, p1) = points[-2], points[-1]
    slope = (p1 - p0) / (n1 - n0) if n1 != n0 else p1 / n1
    return p1 + slope * (steps - n1)


def run_measured(argv: list[str], timeout_s: float, errors: Path) -> dict:
    """Run one command in a process of its own; its wall and CPU seconds and peak RSS."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    start = time.perf_counter()
    with errors.open("w") as stderr:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - start > timeout_s:
                proc.kill()
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                return {"skipped": f"did not finish within {timeout_s:.0f} s"}
            time.sleep(0.05)
    wall_s = time.perf_counter() - start
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    if code != 0:
        last = (errors.read_text().strip().splitlines() or [""])[-1]
        return {"failed": f"exit {code}: {last}"}
    return {
        "wall_s": round(wall_s, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux: KiB
    }


def command(kind: str, steps: int, folder: Path) -> list[str]:
    cli = [sys.executable, "-m", "dynaresize.cli", "run", "--config", CONFIG]
    if kind == "simulate":
        return [*cli, "--mode", "sim", "--steps", str(steps), "--out", str(folder / "sim")]
    return [*cli, "--mode", "replay", "--trace", str(folder / "sim"), "--out", str(folder / "re")]


def measure(sizes: list[int], timeout_s: float) -> list[dict]:
    rows: list[dict] = []
    for steps in sizes:
        folder = Path(tempfile.mkdtemp(prefix=f"bench-scale-{steps}-"))
        try:
            for kind in COMMANDS:
                row: dict = {"command": kind, "steps": steps}
                rows.append(row)
                reason = _skip_reason(kind, steps, rows)
                if reason is not None:
                    row["skipped"] = reason
                else:
                    errors = folder / f"{kind}.stderr"
                    row.update(run_measured(command(kind, steps, folder), timeout_s, errors))
                if "cpu_s" in row:
                    row["cpu_ms_per_step"] = round(1000 * row["cpu_s"] / steps, 3)
                print(json.dumps(row), flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return rows


def _skip_reason(kind: str, steps: int, rows: list[dict]) -> str | None:
    if kind == "replay":
        simulated = next(r for r in rows if r["command"] == "simulate" and r["steps"] == steps)
        if "cpu_s" not in simulated:
            return "no simulated trace of this size to replay"
    else:
        refused = refusal(steps)
        if refused is not None:
            return f"the twin refuses it: {refused}"
    done = [r for r in rows if r["command"] == kind and "peak_rss_mb" in r]
    need = predicted_peak_bytes(done, steps)
    have = memory_bytes()
    if need is not None and have is not None and need > MEMORY_SHARE * have:
        return (
            f"needs about {need / 2**30:.1f} GB by the growth measured at smaller sizes; "
            f"{have / 2**30:.1f} GB available"
        )
    return None


def report(record: dict) -> str:
    lines = [
        "# The twin at scale: simulate and replay, by number of steps",
        "",
        f"`python benchmarks/bench_scale.py` on {record['machine']} (1-minute load average "
        f"{record['load_average_1min']} at the start, {record['load_average_end']} at the end). "
        f"simulate: `dynaresize run --mode sim --config {CONFIG} --steps N`; replay: "
        f"`dynaresize run --mode replay --config {CONFIG} --trace` of that run's folder. "
        "Each in a fresh process: wall and CPU seconds, peak resident memory of that process.",
        "",
        "| command | steps | wall (s) | CPU (s) | CPU ms per step | peak RSS (MB) | note |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in record["results"]:
        note = r.get("skipped") or r.get("failed") or ""
        cells = [r.get(k, "-") for k in ("wall_s", "cpu_s", "cpu_ms_per_step", "peak_rss_mb")]
        lines.append(
            f"| {r['command']} | {r['steps']:,} | " + " | ".join(map(str, cells)) + f" | {note} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps",
        "--sizes",
        dest="sizes",
        type=int,
        nargs="+",
        default=list(DEFAULT_SIZES),
        help="the step counts to run (--sizes: the same)",
    )
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="per command")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where scale.json/md go")
    args = parser.parse_args()
    if any(n < 1 for n in args.sizes):
        parser.error("--steps: every size must be at least 1 step")
    load_start = round(os.getloadavg()[0], 2)
    rows = measure(sorted(set(args.sizes)), args.timeout_s)
    record = {
        "benchmark": "scale",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"{(memory_bytes('MemTotal') or 0) / 2**30:.0f} GB of memory, "
        f"Python {platform.python_version()}",
        "config": CONFIG,
        "load_average_1min": load_start,
        "load_average_end": round(os.getloadavg()[0], 2),
        "results": rows,
    }
    text = report(record)
    print(text)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "scale.json").write_text(json.dumps(record, indent=2) + "\n")
    (args.results / "scale.md").write_text(text)


if __name__ == "__main__":
    main()
