"""The run log: what a live run writes into its folder while it runs, file by file.

The session decides what to record (`step_records.py` builds the records from what the workers
reported); the run log puts each record in its file and keeps the files consistent:

- `workers.json`: every worker's process, host and device, written as soon as the workers
  answer, so that a fault report can name them whatever fails next;
- `setup.json`: the seconds of every part of the setup;
- `trace.jsonl` and `lineage.jsonl` (`records.RunRecorder`): the trace records and the samples
  as the trainers consumed them, synced at every step boundary and converted to the Parquet
  trace directory at the end; a resumed run first drops what was recorded past its checkpoint;
- `weights.jsonl` (`published_weights.py`): the digest of every weights version published.

`config.json` and `fault.json` are the driver's (`driver.py`); `resize_prior.json` is written
with the first measured resize (`observe/setup_prior.py`); the checkpoint is `checkpoint.py`'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from dynaresize.policies.types import Allocation
from dynaresize.traces.schema import RunMeta, StepRecord

from ..config import LiveConfig
from .checkpoint import Checkpoint
from .published_weights import PublishedWeights, append_published, start_file
from .records import LineageRecord, RunRecorder

CONFIG_FILE = "config.json"
FAULT_FILE = "fault.json"
WORKERS_FILE = "workers.json"
SETUP_FILE = "setup.json"


def write_workers(out: Path, infos: list[dict[str, Any]]) -> None:
    """`workers.json`: process id, host and device of every worker, for fault reports."""
    (out / WORKERS_FILE).write_text(json.dumps(infos))


def write_setup(out: Path, timings_s: dict[str, float]) -> None:
    """`setup.json`: the seconds of every part of the setup."""
    (out / SETUP_FILE).write_text(json.dumps(timings_s, indent=2))


def run_meta(
    live: LiveConfig,
    *,
    device_name: str,
    num_params: int,
    allocation: Allocation,
    notes: Sequence[str],
) -> RunMeta:
    """The trace's `RunMeta` of a live run: the cluster and model as the twin names them, and
    notes that say how it ran (the settings that decide its timings first, then `notes`)."""
    return RunMeta(
        source="executor",
        cluster=f"{live.num_workers} workers on {device_name}",
        gpu_type=device_name,
        num_gpus=live.num_workers,
        model_name=json.dumps(
            live.model.model_dump(mode="json", exclude_unset=True), sort_keys=True
        ),
        model_params_b=num_params / 1e9,
        pipeline_mode=live.pipeline,
        start_train_gpus=allocation.train_gpus,
        start_rollout_gpus=allocation.rollout_gpus,
        notes=[
            f"device={live.device.value}",
            f"strategy={live.resize_strategy.value}",
            f"rollout_engines={live.rollout_engines.value}",
            f"rollout_engine={live.rollout_engine.kind.value}",
            f"rollout_engine_release={live.rollout_engine.release.value}",
            f"staging_path={live.staging.path.value}",
            *notes,
        ],
    )


class RunLog:
    """The trace, the lineage and the published weights of one run, open until `close`."""

    def __init__(self, out: Path, *, meta: RunMeta, restored: Checkpoint | None) -> None:
        """Open the files; a resumed run (`restored`) keeps what was recorded up to its
        checkpoint and drops the rest, a fresh one starts them empty."""
        self.out = out
        self.recorder = RunRecorder(
            out, meta=meta, resume_from_step=restored.next_step if restored else None
        )
        start_file(out, resume_version=restored.weights_version if restored else None)

    def published(
        self,
        weights_version: int,
        digest: str,
        *,
        by_worker: int,
        replicas_by_path: dict[str, int] | None = None,
    ) -> None:
        """A weights version the first trainer published, with the digest of its weights and
        how many replicas received it by each path."""
        append_published(
            self.out,
            PublishedWeights(
                weights_version=weights_version,
                digest=digest,
                published_by_device=by_worker,
                replicas_by_path=replicas_by_path or {},
            ),
        )

    def step(
        self, record: StepRecord, samples: Iterable[BaseModel], lineage: Iterable[LineageRecord]
    ) -> None:
        """A step's record, its samples' and workers' records (`samples`), and the samples as
        the trainers consumed them."""
        self.recorder.write([record, *samples])
        self.recorder.write_lineage(lineage)

    def write(self, records: Iterable[BaseModel]) -> None:
        """Trace records of a decision or a resize (its phases and transfers)."""
        self.recorder.write(records)

    def sync(self) -> None:
        """Flush the trace and the lineage to disk: once per step, after its records."""
        self.recorder.sync()

    def close(self, *, quiet: bool = False) -> None:
        """Convert the records to Parquet. `quiet` (a run that failed): a conversion problem is
        not raised over the error that ended the run; the JSONL records stay either way."""
        try:
            self.recorder.finish()
        except Exception:
            self.recorder.close()
            if not quiet:
                raise
