"""`weights.jsonl`: the digest of every weights version the trainers published.

Why: a weights version is a counter the driver increments; a replica that kept old weights would
still carry the new label. The first trainer's digest of the weights it sent at each sync
(`rl.weights_digest`) is written here, one line per version, and every sample carries the digest
of the weights its replica generated it with, so the lineage check (`lineage.py`) compares the
weights themselves, not the labels. Not part of the trace schema; runs recorded before this file
existed are checked by version labels alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .records import truncate_after

WEIGHTS_JSONL = "weights.jsonl"


class PublishedWeights(BaseModel):
    """One weights version as the first trainer published it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    weights_version: int = Field(ge=0, description="Version the sync carried.")
    digest: str = Field(description="`rl.weights_digest` of the published weights.")
    published_by_device: int = Field(ge=0, description="Worker id of the publishing trainer.")
    replicas_by_path: dict[str, int] = Field(
        default_factory=dict,
        description="Replicas that received this version by each path (`cuda_ipc`: from the "
        "trainer's device buffer; `network`: a host vector); empty in files written before.",
    )


def start_file(out_dir: Path, *, resume_version: int | None) -> None:
    """A fresh run starts the file empty; a resumed one keeps the versions up to its
    checkpoint's (those published after it belong to steps the resumed run runs again)."""
    path = Path(out_dir) / WEIGHTS_JSONL
    if resume_version is None:
        path.unlink(missing_ok=True)
    else:
        truncate_after(path, keep=lambda obj: int(obj.get("weights_version", 0)) <= resume_version)


def append_published(out_dir: Path, record: PublishedWeights) -> None:
    with open(Path(out_dir) / WEIGHTS_JSONL, "a", encoding="utf-8") as handle:
        handle.write(record.model_dump_json() + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_published(out_dir: Path) -> dict[int, set[str]] | None:
    """Version -> the digests published for it (one, unless something is wrong); None when the
    run has no `weights.jsonl` (recorded before digests existed)."""
    path = Path(out_dir) / WEIGHTS_JSONL
    if not path.is_file():
        return None
    published: dict[int, set[str]] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                record = PublishedWeights.model_validate(json.loads(line))
                published.setdefault(record.weights_version, set()).add(record.digest)
    return published
