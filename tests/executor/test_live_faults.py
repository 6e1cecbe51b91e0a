"""Faults: a worker SIGKILLed mid-run is reported (worker, role, step, phase), the run stops
within `EXIT_BOUND_S` with its records and last checkpoint intact and none of its staging left,
and `resume` finishes it with no batch lost or repeated. Kills: during a step, during a resize's
state move, while a checkpoint is written."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from dynaresize.executor.cluster.shutdown import EXIT_BOUND_S
from dynaresize.executor.config import LiveConfig
from dynaresize.executor.driver import FAULT_FILE, WORKERS_FILE, run_live
from dynaresize.executor.faults import WorkerLostError
from dynaresize.executor.run_folder import checkpoint
from dynaresize.executor.run_folder.lineage import check_lineage
from dynaresize.executor.staging.ring import POOL_PREFIX, staging_entries
from dynaresize.executor.strategies.strategy import PhaseLog
from dynaresize.traces.io import read_trace
from dynaresize.traces.phases import PhaseName

pytestmark = [pytest.mark.live, pytest.mark.timeout(900)]

KILL_AFTER_STEP = 2


def fault_config() -> LiveConfig:
    return LiveConfig.model_validate(
        {
            "num_workers": 3,
            "initial_allocation": "2:1",
            "num_steps": KILL_AFTER_STEP + 3,  # the resume runs the last three
            "prompts_per_step": 4,
            "samples_per_prompt": 4,
            "max_response_tokens": 24,
            # one_step_off: the checkpoint must carry the batch already generated for the next
            # step, and the resumed run must train on exactly that batch
            "pipeline": "one_step_off",
            "policy": {"kind": "scheduled", "schedule": "0@1:2"},
            "checkpoint_every_steps": 1,
        }
    )


def _checkpointed_step(out) -> int:
    """Next step of the checkpoint in place (-1 before the first)."""
    try:
        return json.loads((out / "checkpoint" / "meta.json").read_text())["next_step"]
    except (FileNotFoundError, json.JSONDecodeError):
        return -1


def test_a_killed_worker_stops_the_run_cleanly_and_resume_completes_it(
    ray_session, tmp_path
) -> None:
    config = fault_config()
    out = tmp_path / "run"
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = run_live(config, out_dir=out)
        except BaseException as err:  # the test inspects whatever ended the run
            outcome["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 600
    # the checkpoint taken at the boundary before step KILL_AFTER_STEP: that step is in flight
    while _checkpointed_step(out) < KILL_AFTER_STEP and thread.is_alive():
        assert time.monotonic() < deadline, "the run never reached the step to kill at"
        time.sleep(0.02)
    victim = json.loads((out / WORKERS_FILE).read_text())[0]  # the one trainer after the resize
    os.kill(victim["pid"], signal.SIGKILL)
    thread.join(timeout=600)
    assert not thread.is_alive()

    error = outcome.get("error")
    assert isinstance(error, WorkerLostError), outcome
    assert (error.worker_id, error.role) == (0, "train")
    assert error.step >= KILL_AFTER_STEP
    fault = json.loads((out / FAULT_FILE).read_text())
    assert fault["worker_id"] == 0 and fault["role"] == "train" and fault["step"] == error.step
    assert fault["phase"] == error.phase == "step"
    assert _staging_of({int(i["pid"]) for i in json.loads((out / WORKERS_FILE).read_text())}) == []
    # the step in flight is the one the last checkpoint resumes at, and every step before it is
    # recorded (and converted to Parquet) exactly once
    assert _checkpointed_step(out) == error.step
    crashed = read_trace(out / "trace").steps
    assert list(crashed.step) == list(range(error.step))

    result = run_live(config, out_dir=out, resume=True)
    assert result.steps_completed == config.num_steps
    steps = read_trace(out / "trace").steps
    assert list(steps.step) == list(range(config.num_steps))  # none repeated, none missing
    summary = check_lineage(out, config)
    assert summary.num_samples == config.num_steps * config.samples_per_step
    assert not (out / FAULT_FILE).exists()


def _staging_of(pids: set[int]) -> list[str]:
    """Staging segments, pipes and grants on this machine owned by one of `pids`."""
    owned = []
    for path in staging_entries():
        name = Path(path).name[len(POOL_PREFIX) :]
        if int(name.split("-", 1)[0]) in pids:
            owned.append(path)
    return owned


@pytest.mark.parametrize("where", ["resize", "checkpoint"])
def test_a_worker_killed_in_a_resize_or_a_checkpoint_write_stops_the_run_within_the_bound(
    ray_session, tmp_path, monkeypatch, where
) -> None:
    """The overlapped strategy's staging waits up to 300 s for a peer: the driver must not."""
    fields = fault_config().model_dump(mode="json", exclude_unset=True)
    config = LiveConfig.model_validate(fields | {"num_steps": 3, "resize_strategy": "overlapped"})
    out = tmp_path / "run"
    killed: dict = {}

    def kill(worker_id: int) -> None:
        if not killed:
            infos = json.loads((out / WORKERS_FILE).read_text())
            killed["pids"] = {int(i["pid"]) for i in infos}
            os.kill(infos[worker_id]["pid"], signal.SIGKILL)
            killed["at"] = time.monotonic()

    if where == "resize":
        original_phase = PhaseLog.phase

        @contextmanager
        def phase(self, name, **kwargs):
            # worker 1 leaves Training (2:1 -> 1:2) and is about to send its slices
            if name is PhaseName.WEIGHT_RESTORE:
                kill(1)
            with original_phase(self, name, **kwargs) as extra:
                yield extra

        monkeypatch.setattr(PhaseLog, "phase", phase)
        expected = (1, "rollout", {"resize"})  # the role map of the resize's target is in force
    else:
        original_save = checkpoint.save
        saves: list[int] = []

        def save(*args, **kwargs):
            saves.append(1)
            if len(saves) == 2:  # the rollout replica, while the second checkpoint is written
                kill(2)
            return original_save(*args, **kwargs)

        monkeypatch.setattr(checkpoint, "save", save)
        expected = (2, "rollout", {"checkpoint", "step"})
    with pytest.raises(WorkerLostError) as caught:
        run_live(config, out_dir=out)
    took_s = time.monotonic() - killed["at"]
    print(f"killed during {where}: run_live raised {took_s:.1f} s after the kill")
    assert took_s < EXIT_BOUND_S, took_s
    error = caught.value
    worker_id, role, phases = expected
    assert (error.worker_id, error.role) == (worker_id, role) and error.phase in phases
    fault = json.loads((out / FAULT_FILE).read_text())
    assert fault["kind"] == "worker_lost" and fault["worker_id"] == worker_id
    assert fault["phase"] == error.phase and fault["step"] == error.step
    assert _staging_of(killed["pids"]) == []


def test_a_run_that_fails_in_the_workers_setup_leaves_the_folder_as_it_found_it(
    ray_session, tmp_path, monkeypatch
) -> None:
    """A worker killed after Ray started and the workers answered (workers.json written), before
    the first step: the run leaves no config.json, workers.json or fault.json behind, nor the
    folder it created; a folder that held a file of the user's keeps exactly that file, and a
    retry without --resume runs there."""
    from dynaresize.executor import session as session_module

    fields = fault_config().model_dump(mode="json", exclude_unset=True)
    # two workers are enough to fail a setup, and start faster than three
    two_workers = {"num_workers": 2, "initial_allocation": "1:1", "policy": {"kind": "static"}}
    config = LiveConfig.model_validate(fields | two_workers | {"num_steps": 1})
    original_write = session_module.write_workers

    def write_then_kill(out, infos) -> None:
        original_write(out, infos)
        assert (out / WORKERS_FILE).is_file()
        os.kill(infos[1]["pid"], signal.SIGKILL)

    monkeypatch.setattr(session_module, "write_workers", write_then_kill)
    new_folder = tmp_path / "new"
    with pytest.raises(WorkerLostError):
        run_live(config, out_dir=new_folder)
    assert not new_folder.exists()

    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("the user's")
    with pytest.raises(WorkerLostError):
        run_live(config, out_dir=kept)
    assert sorted(p.name for p in kept.iterdir()) == ["notes.txt"]

    monkeypatch.setattr(session_module, "write_workers", original_write)
    result = run_live(config, out_dir=kept)
    assert result.steps_completed == 1
    assert (kept / "notes.txt").read_text() == "the user's"
