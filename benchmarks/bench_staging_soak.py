"""Soak: a long CPU live run that resizes at every boundary, with the host memory of staging
sampled throughout and compared with its budget, and what is left afterwards counted.

The run moves trainer state back and forth between 2:1 and 1:2 (`overlapped`, staging on) with
small staging buffers, so that every move cycles the ring many times. A thread of the driver
samples, every `SAMPLE_S`, the resident bytes of every staging segment of the run (the pages of
the /dev/shm files: a page once touched stays allocated until the file is removed, so the sample
is the segment's high-water mark, not a reading that could miss a short peak) and the resident
memory of every worker; the budget is what the pools may
hold: one pool per worker of `HEADER_BYTES + chunk_bytes * num_buffers`. After the run: the
staging entries and the run's processes still there (both must be none).

    PYTHONPATH=$PWD python benchmarks/bench_staging_soak.py --steps 40

Writes staging_soak_cpu.json and staging_soak_cpu.md into --out-dir (default benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import threading
import time
from pathlib import Path

import psutil

RESULTS = Path(__file__).resolve().parent / "results"
SAMPLE_S = 0.05
MIB = 1 << 20


def live_fields(num_steps: int, chunk_mib: int) -> dict:
    schedule = ";".join(f"{s}@{'1:2' if s % 2 == 0 else '2:1'}" for s in range(num_steps - 1))
    return {
        "model": {"preset": "tiny"},
        "device": "cpu",
        "num_workers": 3,
        "initial_allocation": "2:1",
        "candidate_allocations": ["2:1", "1:2"],
        "num_steps": num_steps,
        "prompts_per_step": 2,
        "samples_per_prompt": 2,
        "max_response_tokens": 8,
        "policy": {"kind": "scheduled", "schedule": schedule},
        "checkpoint_every_steps": None,
        "resize_strategy": "overlapped",
        "staging": {"chunk_mib": chunk_mib, "num_buffers": 2},
    }


class Sampler(threading.Thread):
    """Peak resident bytes of the run's staging segments and of its workers."""

    def __init__(self, workers_file: Path) -> None:
        super().__init__(daemon=True)
        self.workers_file = workers_file
        self.stop = threading.Event()
        self.peak_staging_bytes = 0
        self.peak_workers_rss_bytes = 0
        self.peak_segments = 0
        self.samples = 0
        self.pids: set[int] = set()

    def run(self) -> None:
        from dynaresize.executor.staging.ring import POOL_PREFIX, staging_entries

        while not self.stop.wait(SAMPLE_S):
            if not self.pids and self.workers_file.exists():
                try:
                    infos = json.loads(self.workers_file.read_text())
                    self.pids = {int(i["pid"]) for i in infos}
                except (OSError, ValueError):
                    continue
            if not self.pids:
                continue
            staged, segments = 0, 0
            for path in staging_entries():
                name = Path(path).name
                if "." in name or int(name[len(POOL_PREFIX) :].split("-")[0]) not in self.pids:
                    continue
                try:
                    staged += os.stat(path).st_blocks * 512
                    segments += 1
                except OSError:
                    continue
            rss = 0
            for pid in self.pids:
                try:
                    rss += psutil.Process(pid).memory_info().rss
                except psutil.Error:
                    continue
            self.peak_staging_bytes = max(self.peak_staging_bytes, staged)
            self.peak_workers_rss_bytes = max(self.peak_workers_rss_bytes, rss)
            self.peak_segments = max(self.peak_segments, segments)
            self.samples += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--chunk-mib", type=int, default=1)
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args()

    from dynaresize.executor.config import LiveConfig
    from dynaresize.executor.driver import WORKERS_FILE, run_live
    from dynaresize.executor.staging.ring import HEADER_BYTES, staging_entries
    from dynaresize.traces.io import read_trace

    config = LiveConfig.model_validate(live_fields(args.steps, args.chunk_mib))
    budget_per_pool = HEADER_BYTES + config.staging.chunk_mib * MIB * config.staging.num_buffers
    with tempfile.TemporaryDirectory(prefix="dynaresize-soak-") as folder:
        out = Path(folder) / "run"
        sampler = Sampler(out / WORKERS_FILE)
        sampler.start()
        started = time.perf_counter()
        result = run_live(config, out_dir=out)
        wall_s = time.perf_counter() - started
        sampler.stop.set()
        sampler.join()
        trace = read_trace(out / "trace")
        resizes = trace.resizes
        bytes_moved = int(resizes["bytes_moved"].sum()) if len(resizes) else 0
    left_staging = [p for p in staging_entries() if any(str(pid) in p for pid in sampler.pids)]
    left_processes = [pid for pid in sampler.pids if psutil.pid_exists(pid)]
    summary = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "steps": result.steps_completed,
        "resizes": result.num_resizes,
        "wall_s": round(wall_s, 1),
        "chunk_mib": config.staging.chunk_mib,
        "num_buffers": config.staging.num_buffers,
        "pools": config.num_workers,
        "budget_bytes": budget_per_pool * config.num_workers,
        "peak_staging_resident_bytes": sampler.peak_staging_bytes,
        "peak_segments": sampler.peak_segments,
        "peak_workers_rss_bytes": sampler.peak_workers_rss_bytes,
        "bytes_moved_by_resizes": bytes_moved,
        "samples": sampler.samples,
        "staging_entries_left": len(left_staging),
        "worker_processes_left": len(left_processes),
    }
    summary["within_budget"] = summary["peak_staging_resident_bytes"] <= summary["budget_bytes"]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "staging_soak_cpu.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [
        "# Staging soak (CPU)",
        "",
        f"`PYTHONPATH=$PWD python benchmarks/bench_staging_soak.py --steps {args.steps} "
        f"--chunk-mib {args.chunk_mib}` on {summary['machine']} (shared with other work).",
        "",
        f"- {summary['steps']} steps, {summary['resizes']} resizes (2:1 <-> 1:2, overlapped, "
        f"staging on), {summary['wall_s']} s; resizes moved {bytes_moved / MIB:.1f} MiB in all",
        f"- peak resident bytes of the run's staging segments: "
        f"{summary['peak_staging_resident_bytes'] / MIB:.2f} MiB, budget "
        f"{summary['budget_bytes'] / MIB:.2f} MiB ({summary['pools']} pools of "
        f"{summary['num_buffers']} x {summary['chunk_mib']} MiB + header): "
        f"{'within' if summary['within_budget'] else 'OVER'} budget "
        f"({summary['samples']} samples, every {SAMPLE_S * 1000:.0f} ms)",
        "  (a touched page of a segment stays allocated: this is the high-water mark)",
        f"- peak resident memory of the 3 workers together: "
        f"{summary['peak_workers_rss_bytes'] / MIB:.0f} MiB",
        f"- left after the run: {summary['staging_entries_left']} staging entries, "
        f"{summary['worker_processes_left']} worker processes",
        "",
    ]
    (args.out_dir / "staging_soak_cpu.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
