"""A live run's processes from the outside, through the command line as a user runs it.

Runs of a 3-worker, 30-step tiny job, each in a session of its own (as a shell starts a
job), with private staging folders so that the counts are the run's own:
- Ctrl-C (SIGINT to the run's process group) after the first checkpoint: while it runs, every
  listener of its processes is on loopback except Ray's own gRPC servers (one per Ray process,
  two for the raylet, the autoscaler's metrics); after the signal it exits 130 within the bound
  with one line naming the records, the checkpoint and the resume command, `fault.json` says
  where it stopped, and no process, staging segment or pipe is left;
- `--resume` of that run ends cleanly, leaves nothing either, and ends with trainer state bit
  for bit equal to that of a run never interrupted (one such run serves both tests);
- a SIGKILLed driver: every process it started is gone within seconds (the watchdog), and so
  is its staging; `--resume` from the checkpoint it left ends bit for bit where a run never
  interrupted does.
Budget: about 150 s on 2 idle cores (most of it five Ray starts).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from dynaresize.executor.cluster.shutdown import EXIT_BOUND_S, INTERRUPTED_EXIT_CODE
from dynaresize.executor.run_folder import checkpoint
from dynaresize.traces.io import read_trace

pytestmark = [pytest.mark.live, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
POOL_PREFIX = "dynaresize-stage-"
NUM_STEPS = 30
"""Enough steps (about 0.2 s each) that the signal lands while the run is still stepping."""
KILLED_DRIVER_BOUND_S = 20.0
"""The watchdog notes processes every second and waits up to 10 s for killed ones to exit."""

CONFIG = """\
name: tiny_live
cluster:
  gpus_per_node: 3
  num_nodes: 1
  candidate_allocations: ["2:1", "1:2"]
  initial_allocation: "2:1"
  intra_node_bandwidth_gbps: 10
  gpu_memory_gb: 8
model: {num_params_b: 0.0001, activation_memory_gb_per_gpu: 0.1,
        rollout_min_kv_cache_gb_per_gpu: 0.1}
workload: {preset: low_variance, samples_per_step: 4, max_response_tokens: 8}
costs: {rollout: {kv_capacity_tokens_per_replica: null}}
pipeline: {mode: one_step_off, resize_strategy: overlapped}
simulation: {num_steps: 30, seed: 0}
live:
  model: {preset: tiny}
  device: cpu
  prompts_per_step: 2
  samples_per_prompt: 2
  max_response_tokens: 8
  checkpoint_every_steps: 1
  policy: {kind: scheduled, schedule: "0@1:2"}
"""

RAY_GRPC_LISTENERS = {"gcs_server": 1, "raylet": 2, "monitor.py": 1}
"""Listeners on every interface that Ray 2.60 opens with no setting to bind them (its gRPC
servers; the autoscaler monitor's metrics): by process, one for any other Ray process."""


class Run:
    """One `dynaresize run --mode live` in a process group of its own, with private staging."""

    def __init__(self, tmp: Path, *extra: str) -> None:
        self.tmp = tmp
        self.out = tmp / "run"
        self.shm = Path("/dev/shm") / f"dynaresize-test-{os.getpid()}-{tmp.name}"
        self.shm.mkdir(exist_ok=True)
        # Ray's unix sockets live under the temp folder: a short path keeps them under 108 bytes
        self.temp = Path("/tmp") / f"drt-{os.getpid()}-{tmp.name}"
        self.temp.mkdir(exist_ok=True)
        config = tmp / "tiny.yaml"
        config.write_text(CONFIG)
        env = dict(
            os.environ,
            PYTHONPATH=str(REPO),
            DYNARESIZE_SHM_DIR=str(self.shm),
            TMPDIR=str(self.temp),
            RAY_AUTH_TOKEN_PATH=str(tmp / "auth_token"),  # written by the run, owner-only
        )
        for name in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
            env.pop(name, None)
        command = [sys.executable, "-m", "dynaresize.cli", "run", "--mode", "live"]
        self.process = subprocess.Popen(
            [*command, "--config", str(config), "--out", str(self.out), *extra],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.seen: dict[int, psutil.Process] = {}

    def wait_for_checkpoint(self, timeout_s: float = 600.0) -> None:
        meta = self.out / "checkpoint" / "meta.json"
        deadline = time.monotonic() + timeout_s
        while not meta.exists():
            assert self.process.poll() is None, self.communicate()
            assert time.monotonic() < deadline, "no checkpoint in time"
            self.note_processes()
            time.sleep(0.2)
        self.note_processes()

    def note_processes(self) -> list[psutil.Process]:
        """The driver and everything below it now (remembered for the leftover check)."""
        try:
            driver = psutil.Process(self.process.pid)
            procs = [driver, *driver.children(recursive=True)]
        except psutil.Error:
            return []
        for proc in procs:
            self.seen.setdefault(proc.pid, proc)
        return procs

    def communicate(self, timeout_s: float = 600.0) -> tuple[str, str]:
        return self.process.communicate(timeout=timeout_s)

    def staging(self) -> list[str]:
        folders = (self.shm, self.temp)
        return sorted(n for f in folders for n in os.listdir(f) if n.startswith(POOL_PREFIX))

    def alive(self) -> list[str]:
        left = []
        for proc in self.seen.values():
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{proc.pid} {' '.join(proc.cmdline())[:80]}")
            except psutil.Error:
                continue
        return left

    def close(self) -> None:
        """At the end: stop what is left of this run by the processes it had (nothing, when the
        test passed) and remove its private folders."""
        for proc in self.seen.values():
            try:
                proc.kill()
            except psutil.Error:
                continue
        if self.process.poll() is None:
            self.process.kill()
        shutil.rmtree(self.shm, ignore_errors=True)
        shutil.rmtree(self.temp, ignore_errors=True)


def wide_listeners(procs: list[psutil.Process]) -> dict[str, list[str]]:
    """Listeners not on loopback, by process (pid and command)."""
    found: dict[str, list[str]] = {}
    for proc in procs:
        try:
            conns = proc.net_connections(kind="inet")
            name = f"{proc.pid} {' '.join(proc.cmdline())[:100]}"
        except psutil.Error:
            continue
        for conn in conns:
            if conn.status != psutil.CONN_LISTEN:
                continue
            ip = conn.laddr.ip
            if ip.startswith("127.") or ip == "::1":
                continue
            found.setdefault(name, []).append(f"{ip}:{conn.laddr.port}")
    return found


def allowed_wide(name: str) -> int:
    for key, count in RAY_GRPC_LISTENERS.items():
        if key in name:
            return count
    return 1  # a Ray core worker's gRPC server: the driver, each worker, each agent


@pytest.fixture
def runs(tmp_path):
    started: list[Run] = []

    def start(name: str, *extra: str) -> Run:
        folder = tmp_path / name
        folder.mkdir(exist_ok=True)
        run = Run(folder, *extra)
        started.append(run)
        return run

    yield start
    for run in started:
        run.close()


@pytest.fixture(scope="module")
def uninterrupted_state(tmp_path_factory):
    """The trainer state a run never interrupted ends with, by step count: one run per count
    for the module (both tests compare against the same 30-step run when their kill came
    early enough, which it does unless steps take under 0.1 s)."""
    states: dict[int, dict[str, torch.Tensor]] = {}
    started: list[Run] = []

    def state(num_steps: int) -> dict[str, torch.Tensor]:
        if num_steps not in states:
            run = Run(
                tmp_path_factory.mktemp(f"uninterrupted{num_steps}"), "--steps", f"{num_steps}"
            )
            started.append(run)
            _, err = run.communicate()
            assert run.process.returncode == 0, err
            states[num_steps] = checkpoint.load(run.out).vectors
        return states[num_steps]

    yield state
    for run in started:
        run.close()


def test_ctrl_c_then_resume_leave_nothing_and_listen_on_loopback(runs, uninterrupted_state) -> None:
    run = runs("interrupted")
    run.wait_for_checkpoint()
    procs = run.note_processes()
    workers = [p for p in procs if "LiveWorker" in " ".join(p.cmdline())]
    assert len(workers) == 3, [p.cmdline() for p in procs]
    wide = wide_listeners(procs)
    too_many = {name: addrs for name, addrs in wide.items() if len(addrs) > allowed_wide(name)}
    assert not too_many, f"listening beyond loopback: {too_many}"

    os.killpg(run.process.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole job
    stopped = time.monotonic()
    _, err = run.communicate(timeout_s=EXIT_BOUND_S + 30)
    took_s = time.monotonic() - stopped
    print(f"Ctrl-C: exit {run.process.returncode} {took_s:.1f} s after the signal")
    assert run.process.returncode == INTERRUPTED_EXIT_CODE, err
    assert took_s < EXIT_BOUND_S, took_s
    lines = [line for line in err.splitlines() if line.startswith("interrupted:")]
    assert len(lines) == 1, err
    assert str(run.out) in lines[0] and "checkpoint at step" in lines[0]
    assert lines[0].endswith("--resume"), lines[0]
    assert (run.out / "fault.json").is_file(), err
    fault = json.loads((run.out / "fault.json").read_text())
    assert fault["kind"] == "interrupted" and fault["phase"] in {"step", "resize", "checkpoint"}
    assert run.alive() == []
    assert run.staging() == []

    assert f"--out {run.out}" in lines[0]
    resumed = runs("interrupted", "--resume")
    out, err = resumed.communicate()
    assert resumed.process.returncode == 0, err
    assert f"live run: {NUM_STEPS} steps" in out
    assert resumed.staging() == []
    assert not (run.out / "fault.json").exists()
    trace = read_trace(run.out / "trace")
    assert list(trace.steps.step) == list(range(NUM_STEPS))  # none lost or repeated
    # the interrupted and resumed run ends bit for bit where a run never interrupted does
    _ends_where_an_uninterrupted_run_does(uninterrupted_state(NUM_STEPS), run.out)
    prewarm = trace.resizes[trace.resizes["phase"] == "comm_prewarm"]
    assert list(prewarm["comm_cache_hits"]) == [2]  # both groups of 1:2 came from the cache
    assert list(prewarm["comm_groups_built"]) == [0]
    oversubscribed = [n for n in trace.meta.notes if n.startswith("oversubscribed:")]
    assert bool(oversubscribed) is ((os.cpu_count() or 1) < 3), trace.meta.notes


def test_a_killed_driver_leaves_nothing_and_resumes_bit_for_bit(runs, uninterrupted_state) -> None:
    run = runs("killed", "--steps", "1000")  # still stepping when killed, however fast steps are
    run.wait_for_checkpoint()
    time.sleep(2.0)  # the watchdog notes every process at least once
    run.note_processes()
    assert run.staging(), "the run holds staging pools while it runs"
    os.kill(run.process.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    run.communicate()
    deadline = time.monotonic() + KILLED_DRIVER_BOUND_S
    while (run.alive() or run.staging()) and time.monotonic() < deadline:
        time.sleep(0.5)
    print(
        f"killed driver: {len(run.alive())} processes left {time.monotonic() - killed_at:.1f} s on"
    )
    assert run.alive() == []
    assert run.staging() == []

    # the checkpoint the kill left (perhaps mid-write) resumes, and the run ends bit for bit
    # where one never interrupted does
    num_steps = max(NUM_STEPS, checkpoint.load(run.out).next_step + 2)
    resumed = runs("killed", "--resume", "--steps", str(num_steps))
    out, err = resumed.communicate()
    assert resumed.process.returncode == 0, err
    assert f"live run: {num_steps} steps" in out
    assert resumed.alive() == [] and resumed.staging() == []
    steps = read_trace(run.out / "trace").steps
    assert list(steps.step) == list(range(num_steps))  # none lost or repeated
    _ends_where_an_uninterrupted_run_does(uninterrupted_state(num_steps), run.out)


def _ends_where_an_uninterrupted_run_does(plain_state: dict[str, torch.Tensor], out: Path) -> None:
    """The trainer state a resumed run ended with is bit for bit `plain_state`, that of a run
    never interrupted with the same step count."""
    resumed_state = checkpoint.load(out).vectors
    assert resumed_state.keys() == plain_state.keys()
    for name, vector in plain_state.items():
        assert torch.equal(resumed_state[name], vector), name
