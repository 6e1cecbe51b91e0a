"""The end of a run, without Ray: the watchdog kills what a killed driver started (and nothing
when the driver said it cleaned up), staging left by a dead owner is swept with a note, cleanup
steps are bounded, and a Ctrl-C's line says where things are and how to resume. About 10 s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

from dynaresize.executor import faults
from dynaresize.executor.cluster import shutdown
from dynaresize.executor.cluster.watchdog import REFRESH_S
from dynaresize.executor.staging.ring import POOL_PREFIX, staging_entries

REPO = Path(__file__).resolve().parents[2]

FAKE_DRIVER = textwrap.dedent(
    """
    import subprocess, sys, time
    from dynaresize.executor.cluster.shutdown import Guard
    guard = Guard.start()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(child.pid, flush=True)
    if sys.argv[1] == "clean":
        guard.done()
        print("done", flush=True)
    time.sleep(600)
    """
)


def _fake_driver(mode: str) -> tuple[subprocess.Popen[str], psutil.Process]:
    """A process that starts the watchdog and a child, as a driver starts Ray's processes."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    driver = subprocess.Popen(
        [sys.executable, "-c", FAKE_DRIVER, mode], stdout=subprocess.PIPE, text=True, env=env
    )
    assert driver.stdout is not None
    child = psutil.Process(int(driver.stdout.readline()))
    if mode == "clean":
        assert driver.stdout.readline().strip() == "done"
    return driver, child


def test_a_killed_driver_takes_what_it_started_with_it() -> None:
    driver, child = _fake_driver("killed")
    time.sleep(3 * REFRESH_S)  # the watchdog has noted the child
    driver.kill()
    driver.wait()
    gone, alive = psutil.wait_procs([child], timeout=15)
    for proc in alive:  # only if the test fails: leave nothing behind
        proc.kill()
    assert gone and not alive, "the driver's child outlived it"


def test_a_driver_that_cleaned_up_leaves_its_processes_alone() -> None:
    driver, child = _fake_driver("clean")
    try:
        driver.kill()
        driver.wait()
        time.sleep(3 * REFRESH_S)
        assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    finally:
        child.kill()


def test_staging_of_a_dead_owner_is_swept_and_the_run_says_so(tmp_path, monkeypatch) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setenv("DYNARESIZE_SHM_DIR", str(shm))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    pool = f"{POOL_PREFIX}{dead.pid}-abc"
    (shm / pool).write_bytes(b"\0" * 64)
    for suffix in (".ready", ".free"):
        os.mkfifo(tmp_path / (pool + suffix))
    live_pool = f"{POOL_PREFIX}{os.getpid()}-def"  # its owner (this process) is alive: kept
    (shm / live_pool).write_bytes(b"\0")
    note = shutdown.sweep_left_staging()
    assert note is not None and "removed 3 staging entries (1 shared-memory segments" in note
    assert [Path(p).name for p in staging_entries()] == [live_pool]
    assert shutdown.sweep_left_staging() is None


def test_a_cleanup_step_that_hangs_is_left_behind_within_its_bound(capsys) -> None:
    started = time.monotonic()
    assert not shutdown.bounded(lambda: time.sleep(30), what="a stuck step", limit_s=0.5)
    assert time.monotonic() - started < 5
    assert "a stuck step took over 0.5 s" in capsys.readouterr().err
    assert shutdown.bounded(lambda: None, what="a quick step")
    assert not shutdown.bounded(lambda: 1 / 0, what="a failing step")


def test_the_interrupted_line_names_records_checkpoint_and_resume(tmp_path) -> None:
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "meta.json").write_text(json.dumps({"next_step": 3}))
    line = shutdown.interrupted_message(tmp_path, resume_command="dynaresize run ... --resume")
    assert "\n" not in line
    assert str(tmp_path) in line and "checkpoint at step 3" in line
    assert line.endswith("continue with: dynaresize run ... --resume")


def test_fault_json_of_an_interrupted_run(tmp_path) -> None:
    class Progress:
        step, phase = 4, "resize"

    faults.write_fault(tmp_path / "fault.json", KeyboardInterrupt(), Progress())
    fault = json.loads((tmp_path / "fault.json").read_text())
    assert fault["kind"] == "interrupted" and fault["step"] == 4 and fault["phase"] == "resize"


def test_fault_json_of_a_lost_worker_and_none_for_other_errors(tmp_path) -> None:
    class Progress:
        step, phase = 9, "step"

    lost = faults.WorkerLostError(
        worker_id=2, role="rollout", step=3, doing="generating batch 4", cause="ActorDiedError"
    )
    faults.write_fault(tmp_path / "fault.json", lost, Progress())
    fault = json.loads((tmp_path / "fault.json").read_text())
    assert fault == {
        "kind": "worker_lost",
        "worker_id": 2,
        "role": "rollout",
        "step": 3,
        "phase": "step",
        "doing": "generating batch 4",
        "message": str(lost),
    }
    faults.write_fault(tmp_path / "other.json", ValueError("bad"), Progress())
    assert not (tmp_path / "other.json").exists()
