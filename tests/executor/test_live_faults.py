"""Faults: a worker SIGKILLed mid-run is reported (worker, role, step), the run stops with its
records and last checkpoint intact, and `resume` finishes it with no batch lost or repeated."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from dynaresize.executor.config import LiveConfig
from dynaresize.executor.driver import FAULT_FILE, WORKERS_FILE, run_live
from dynaresize.executor.lineage import check_lineage
from dynaresize.executor.runtime import WorkerLostError
from dynaresize.traces.io import read_trace

pytestmark = [pytest.mark.live, pytest.mark.timeout(900)]

KILL_AFTER_STEP = 2


def fault_config() -> LiveConfig:
    return LiveConfig.model_validate(
        {
            "num_workers": 3,
            "initial_allocation": "2:1",
            "num_steps": 6,
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
