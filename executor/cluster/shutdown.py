"""How a live run ends, whatever ends it: nothing it started is left running or left in memory.

- `Guard` starts the watchdog (`watchdog.py`) before Ray starts and tells it when the driver has
  cleaned up after itself; a driver that dies without saying so has its processes killed and
  its staging swept by the watchdog.
- `sweep_left_staging` runs at the start of every local run: staging pools and pipes whose
  owner process is gone (a run killed before the watchdog could act, or a machine whose
  watchdog was killed too) are removed, and the run says how many.
- `bounded` runs a cleanup step with a time limit, so that a cleanup blocked on a dead peer
  cannot keep the driver from exiting (`EXIT_BOUND_S` is the bound documented for every fault).
- `RendezvousFolder` holds the file the workers of a one-machine run meet through;
- `interrupted_message` is the one line a Ctrl-C prints: where the records and checkpoint are,
  and the command that resumes the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..run_folder.unstarted import kept_nothing
from ..staging.ring import staging_entries, sweep_stale_pools
from .watchdog import START_TIMEOUT_S

CLEANUP_STEP_S = 20.0
"""Longest one cleanup step (releasing staging, stopping workers, stopping Ray) may take."""
EXIT_BOUND_S = 90.0
"""Bound on the time from a fault (a lost worker, Ctrl-C) to the driver's exit, cleanup included:
a lost worker is seen within `Runtime.LOST_CHECK_S` and each of the few cleanup steps is bounded
by `CLEANUP_STEP_S`."""
INTERRUPTED_EXIT_CODE = 130


class Guard:
    """The driver's end of the watchdog's pipe. `done()` after an orderly cleanup."""

    def __init__(self, process: subprocess.Popen[bytes] | None) -> None:
        self.process = process

    @classmethod
    def start(cls) -> Guard:
        """Start the watchdog of this process (in a session of its own)."""
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "dynaresize.executor.cluster.watchdog", str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        except OSError:
            return cls(None)
        _wait_until_watching(process)
        return cls(process)

    def done(self) -> None:
        """The driver cleaned up itself: the watchdog exits without killing anything."""
        if self.process is None or self.process.stdin is None:
            return
        with contextlib.suppress(OSError):
            self.process.stdin.write(b"done")
            self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        self.process = None


def _wait_until_watching(process: subprocess.Popen[bytes]) -> None:
    """Until the watchdog says it watches (its first note of the driver's descendants), so that
    what the driver starts next is noted even if the driver is killed at once; at most
    `watchdog.START_TIMEOUT_S` (past it the run goes on, as without a watchdog)."""
    assert process.stdout is not None
    with process.stdout:
        readable, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
        if readable:
            process.stdout.readline()


def sweep_left_staging() -> str | None:
    """Remove staging whose owner is gone; a note saying how much, or None if there was none."""
    before = len(staging_entries())
    segments = sweep_stale_pools()
    removed = before - len(staging_entries())
    if removed <= 0:
        return None
    return (
        f"removed {removed} staging entries ({segments} shared-memory segments and their "
        "pipes) left by a run that did not end cleanly"
    )


def bounded(step: Callable[[], object], *, what: str, limit_s: float = CLEANUP_STEP_S) -> bool:
    """Run `step` in a daemon thread for at most `limit_s`; False when it failed or ran over.

    A step that runs over keeps running in the background, where it can do no harm: the
    processes it waits for are killed by the steps after it.
    """
    failure: list[BaseException] = []

    def run() -> None:
        try:
            step()
        except BaseException as err:  # reported by the return value: cleanup goes on
            failure.append(err)

    thread = threading.Thread(target=run, name=f"cleanup: {what}", daemon=True)
    thread.start()
    thread.join(limit_s)
    if thread.is_alive():
        print(f"note: {what} took over {limit_s:g} s; left behind", file=sys.stderr)
        return False
    return not failure


def interrupted_message(out: Path, *, resume_command: str) -> str:
    """One line for a run stopped by Ctrl-C: records, the checkpoint, how to continue (or, before
    the first step, that nothing was kept)."""
    if kept_nothing(out):
        return f"interrupted before the first step: nothing kept in {out}"
    meta = out / "checkpoint" / "meta.json"
    try:
        next_step = int(json.loads(meta.read_text())["next_step"])
        checkpoint = f"checkpoint at step {next_step} in {out / 'checkpoint'}"
    except (OSError, ValueError, KeyError, TypeError):
        checkpoint = "no checkpoint yet"
    return f"interrupted: records kept in {out}, {checkpoint}; continue with: {resume_command}"


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """A second Ctrl-C during cleanup does not cut it short (each step is bounded anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass
class RendezvousFolder:
    """A private temporary folder holding the world group's rendezvous file (removed at the end):
    on one machine the workers meet through it and no TCP store listens anywhere."""

    path: Path

    @classmethod
    def create(cls) -> RendezvousFolder:
        return cls(Path(tempfile.mkdtemp(prefix="dynaresize-rendezvous-")))

    @property
    def file(self) -> str:
        return str(self.path / "world")

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
