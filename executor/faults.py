"""What ended a live run: a lost worker, or Ctrl-C, and its record `fault.json`.

`WorkerLostError` is raised by the driver's runtime (`cluster/runtime.py`) when a worker
process dies while the run needs it; `write_fault` records it, or a Ctrl-C, for the driver
(`driver.py`) and for a later `--resume`. Neither needs Ray or torch, so the command line, the
runtime and the shutdown all import this module, and none of them imports another for it.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Protocol


class WorkerLostError(RuntimeError):
    """A worker process died (killed, crashed, out of memory) while the run needed it."""

    def __init__(
        self, *, worker_id: int, role: str, step: int, doing: str, cause: str, phase: str = "step"
    ) -> None:
        self.worker_id, self.role, self.step, self.doing = worker_id, role, step, doing
        self.phase = phase
        super().__init__(
            f"worker {worker_id} ({role}) was lost during step {step} ({phase}) while {doing}: "
            f"{cause}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "role": self.role,
            "step": self.step,
            "phase": self.phase,
            "doing": self.doing,
        }


class Progress(Protocol):
    """Where the run was (the driver's runtime qualifies)."""

    @property
    def step(self) -> int: ...

    @property
    def phase(self) -> str: ...


def fault_record(err: BaseException, progress: Progress) -> dict[str, Any] | None:
    """The content of fault.json for a run ended by a lost worker or by Ctrl-C (other errors:
    None): what, where (worker and role when one was lost), at which step and in which phase."""
    if isinstance(err, WorkerLostError):
        return {"kind": "worker_lost", **err.as_dict(), "message": str(err)}
    if isinstance(err, KeyboardInterrupt):
        return {
            "kind": "interrupted",
            "worker_id": None,
            "role": None,
            "step": int(progress.step),
            "phase": str(progress.phase),
            "message": "stopped by SIGINT (Ctrl-C)",
        }
    return None


def write_fault(path: Path, err: BaseException, progress: Progress) -> None:
    """fault.json for a run ended by a lost worker or by Ctrl-C (other errors: none)."""
    record = fault_record(err, progress)
    if record is None:
        return
    with contextlib.suppress(OSError):
        path.write_text(json.dumps(record))
