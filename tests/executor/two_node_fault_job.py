"""A worker on the second node killed in the middle of a move, then `--resume`, on a two-node
cluster already running (its address on the command line, its token in the environment).

Run in a process of its own by tests/executor/test_live_two_nodes.py: a driver's Ray
authentication is fixed for its process's lifetime, so the test process cannot join the cluster.
The kill is real: when the driver has asked the workers to move the master slices of the resize
2:2 -> 3:1 after step 1 (worker 2, on node_b, receives over the network from worker 1 on
node_a), worker 2 gets SIGKILL. Writes what happened to OUT/fault_report.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

NUM_STEPS = 4
VICTIM = 2  # node_b's first worker, which the resize after step 1 makes a trainer


def job_config():
    from dynaresize.config import load_run_config

    return load_run_config(
        "live_two_nodes",
        overrides={
            "simulation": {"num_steps": NUM_STEPS},
            "live": {
                "max_response_tokens": 16,
                "policy": {
                    "kind": "scheduled",
                    "schedule": [
                        {"step": 1, "allocation": "3:1"},
                        {"step": 2, "allocation": "2:2"},
                    ],
                },
            },
        },
    )


def kill_when_the_master_slices_move(out: Path) -> tuple[dict, Callable[[], None]]:
    """Wrap the driver's remote calls: right after the move of the master slices starts, the
    victim is killed (once). Returns what was killed and how to unwrap the calls."""
    from dynaresize.executor.cluster.runtime import Runtime
    from dynaresize.executor.worker.overlapped import OverlappedWorkerSide

    original = Runtime.call
    killed: dict = {}

    def call(self, worker_ids, method, *args, **kwargs):
        calls = original(self, worker_ids, method, *args, **kwargs)
        if method is OverlappedWorkerSide.move_master_slices and not killed:
            info = json.loads((out / "workers.json").read_text())[VICTIM]
            os.kill(info["pid"], signal.SIGKILL)
            killed.update(worker_id=VICTIM, pid=info["pid"], step=self.step)
        return calls

    Runtime.call = call  # type: ignore[method-assign]
    return killed, lambda: setattr(Runtime, "call", original)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)

    from dynaresize.executor.driver import FAULT_FILE, run_live
    from dynaresize.executor.faults import WorkerLostError
    from dynaresize.executor.run_folder.lineage import check_lineage
    from dynaresize.traces.io import read_trace

    config = job_config()
    report: dict = {}
    killed, unwrap = kill_when_the_master_slices_move(out)
    try:
        run_live(config, address=args.address, out_dir=out)
        report["error"] = None
    except WorkerLostError as err:
        report["error"] = {"type": "WorkerLostError", **err.as_dict(), "message": str(err)}
    except Exception as err:  # reported to the test, which says what it expected
        report["error"] = {"type": type(err).__name__, "message": str(err)}
    unwrap()
    report["killed"] = killed
    fault = out / FAULT_FILE
    report["fault"] = json.loads(fault.read_text()) if fault.exists() else None
    checkpoint = out / "checkpoint" / "meta.json"
    report["checkpoint_next_step"] = (
        json.loads(checkpoint.read_text())["next_step"] if checkpoint.exists() else None
    )
    report["crashed_steps"] = [int(s) for s in read_trace(out / "trace").steps.step]

    result = run_live(config, address=args.address, out_dir=out, resume=True)
    report["resumed_steps_completed"] = result.steps_completed
    report["steps"] = [int(s) for s in read_trace(out / "trace").steps.step]
    summary = check_lineage(out, config.live)
    report["lineage_samples"] = summary.num_samples
    report["samples_expected"] = NUM_STEPS * config.live.samples_per_step
    report["fault_file_left"] = (out / FAULT_FILE).exists()
    (out / "fault_report.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
