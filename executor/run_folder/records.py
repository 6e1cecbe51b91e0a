"""What a live run writes while it runs, and how it reads it back.

Two append-only files in the run folder, both flushed and synced to disk at every step boundary,
so a crash loses at most the step in flight:

- `trace.jsonl`: the shared trace schema (steps, resize phases, decisions, samples), written by
  `traces.io.JsonlTraceWriter` and converted to the Parquet trace directory `trace/` at the end;
  the twin replays it like any other trace.
- `lineage.jsonl`: one `LineageRecord` per trained sample, as reported by the trainer that
  consumed it. The lineage checks (each step trains exactly one batch of the expected weights
  version; no sample is lost or used twice across resizes) read this file, so they check what the
  trainers did, not what the driver meant them to do.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dynaresize.traces.io import JsonlTraceWriter
from dynaresize.traces.schema import RunMeta, StepRecord
from dynaresize.traces.staged_dir import write_file_atomically

TRACE_JSONL = "trace.jsonl"
TRACE_DIR = "trace"
LINEAGE_JSONL = "lineage.jsonl"


class LineageRecord(BaseModel):
    """One sample as a trainer consumed it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: int = Field(ge=0, description="Training step that consumed the sample.")
    rollout_batch_id: int = Field(ge=0, description="Batch the sample was generated in.")
    prompt_id: int = Field(ge=0, description="Prompt id, unique within the run.")
    sample_index: int = Field(ge=0, description="Index of the sample within its prompt's group.")
    generated_weights_version: int = Field(
        ge=0, description="Weights version of the rollout replica that generated it."
    )
    generated_weights_digest: str | None = Field(
        default=None,
        description="Digest of the weights the generating engine loaded (`rl.weights_digest`); "
        "None in records written before engines reported it.",
    )
    generated_by_device: int = Field(ge=0, description="Worker id that generated it.")
    consumed_by_device: int = Field(
        ge=0, description="Worker id of the trainer that trained on it."
    )
    trainer_weights_version: int = Field(
        ge=0, description="Weights version of the trainer when it computed the gradient."
    )
    response_tokens: int = Field(ge=0, description="Response length (tokens).")
    data_source: str | None = Field(
        default=None,
        description="`data_source` of the dataset row the sample's prompt came from (`repeat` "
        "for the built-in task); None in records written before it was kept.",
    )
    extra_info_index: str | None = Field(
        default=None,
        description="`extra_info.index` of that row, as text; None where the row has none.",
    )


def fsync_path(path: Path) -> None:
    """Force what was written (and flushed) to `path` onto the disk, whoever holds it open."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def truncate_after(path: Path, *, keep: Callable[[dict[str, Any]], bool]) -> None:
    """Rewrite a JSONL file keeping the lines whose parsed object satisfies `keep`.

    A resumed run first drops what the crashed run recorded past its checkpoint, so that no step
    appears twice. A line cut mid-write by the crash is dropped too. Atomic: temp file + rename.
    """
    if not path.exists():
        return
    kept = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if keep(obj):
                kept.append(line if line.endswith("\n") else line + "\n")
    write_file_atomically(path, lambda handle: handle.writelines(kept))


class RunRecorder:
    """Owns the two JSONL files of a run; `sync()` at every step boundary."""

    def __init__(self, out_dir: Path, *, meta: RunMeta, resume_from_step: int | None) -> None:
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.trace_path = out_dir / TRACE_JSONL
        self.lineage_path = out_dir / LINEAGE_JSONL
        if resume_from_step is None:
            for path in (self.trace_path, self.lineage_path):
                path.unlink(missing_ok=True)
        else:
            for path in (self.trace_path, self.lineage_path):
                truncate_after(path, keep=_before(resume_from_step))
        self.trace = JsonlTraceWriter(self.trace_path, meta=meta, fsync=False)
        self._lineage = open(self.lineage_path, "a", encoding="utf-8")  # noqa: SIM115
        self.has_steps = resume_from_step is not None and resume_from_step > 0

    def write(self, records: Iterable[BaseModel]) -> None:
        for record in records:
            self.trace.write(record)
            self.has_steps = self.has_steps or isinstance(record, StepRecord)

    def write_lineage(self, records: Iterable[LineageRecord]) -> None:
        for record in records:
            self._lineage.write(record.model_dump_json() + "\n")
        self._lineage.flush()

    def sync(self) -> None:
        """Flush both files to disk: called once per step, after the step's records."""
        self._lineage.flush()
        fsync_path(self.trace_path)
        os.fsync(self._lineage.fileno())

    def close(self) -> None:
        self.trace.close()
        self._lineage.close()

    def finish(self) -> Path | None:
        """Close and convert the JSONL trace into the Parquet trace directory (if any step ran)."""
        self._lineage.close()
        if not self.has_steps:
            self.trace.close()
            return None
        return self.trace.finish(self.out_dir / TRACE_DIR)


def _before(step: int):
    """Keep meta lines and every record that belongs to a step before `step`."""

    def keep(obj: dict) -> bool:
        if obj.get("record") == "meta":
            return True
        return int(obj.get("step", 0)) < step

    return keep


def read_lineage(out_dir: Path) -> list[LineageRecord]:
    path = Path(out_dir) / LINEAGE_JSONL
    with open(path, encoding="utf-8") as handle:
        return [LineageRecord.model_validate_json(line) for line in handle if line.strip()]
