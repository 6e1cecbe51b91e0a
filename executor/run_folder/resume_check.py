"""What `--resume` accepts: the same run, continued; never a different run under the same folder.

Why: a resume that silently took another seed, model or batch size would overwrite the run's
`config.json` and produce records that look like one run but are two. So before Ray starts the
resolved config is compared field by field with the `config.json` the checkpointed run wrote:

- fields in `RESUME_MAY_CHANGE` do not change what the run computes (how far it goes, how often
  it checkpoints, whether batches are kept, how long a worker call may take): a difference is
  allowed and recorded in `resumes.json`;
- any other difference (seed, model, task, split and candidates, batch sizes, policy, pipeline,
  strategy, devices, placement, staging, ...) is refused with one line naming every field.

`num_steps` may grow or shrink but not below the checkpoint's next step. The checkpoint itself
must fit the config: its allocation is one of the run's candidate splits of `num_workers`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dynaresize.config_io import ConfigError

from ..config import LiveConfig
from .checkpoint import Checkpoint
from .checkpoint_manifest import CheckpointError
from .run_log import CONFIG_FILE

RESUMES_FILE = "resumes.json"

RESUME_MAY_CHANGE = frozenset(
    {
        "num_steps",
        "checkpoint_every_steps",
        "record_batches",
        "worker_timeout_s",
        "export_hf_dir",
        "rollout_engine.release",
    }
)
"""`live` fields (top-level, or dotted) a resume may change: none of them changes a sample or a
weight. The export folder is where the trained policy is written at the end;
`rollout_engine.release` only decides whether an engine is kept between roles (samples are seeded
by step, prompt and index); runs written before `auto` recorded `destroy`."""


class ResumeMismatchError(ConfigError):
    """The resumed config is not the checkpointed run's (one line naming the fields)."""


@dataclass(frozen=True)
class ResumeNote:
    """What a resume changed (allowed fields only) and what it noticed about the checkpoint."""

    from_step: int
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "resumed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "from_step": self.from_step,
            "changed": {k: {"before": a, "after": b} for k, (a, b) in self.changed.items()},
            "notes": list(self.notes),
        }


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def read_checkpointed_config(out: Path) -> LiveConfig:
    """The `live` config the run in `out` wrote, validated with today's defaults filled in."""
    path = out / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"--resume: {path}: missing; the run's config is needed to resume")
    try:
        return LiveConfig.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise CheckpointError(f"--resume: {path}: not readable ({err})") from None
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise CheckpointError(
            f"--resume: {path}: not a live config ({where}: {first['msg']})"
        ) from None


def config_differences(before: LiveConfig, after: LiveConfig) -> dict[str, tuple[Any, Any]]:
    """Dotted field -> (checkpointed value, resumed value), for every field that differs."""
    old = _flatten(before.model_dump(mode="json"))
    new = _flatten(after.model_dump(mode="json"))
    return {
        key: (old.get(key), new.get(key))
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    }


def check_resume(live: LiveConfig, out: Path, restored: Checkpoint) -> ResumeNote:
    """Refuse a resume that would change the run; return what it changes that is allowed."""
    before = read_checkpointed_config(out)
    differences = config_differences(before, live)
    refused = {
        k: v
        for k, v in differences.items()
        if k not in RESUME_MAY_CHANGE and k.split(".")[0] not in RESUME_MAY_CHANGE
    }
    if refused:
        shown = "; ".join(f"{k}: {_short(a)} -> {_short(b)}" for k, (a, b) in refused.items())
        raise ResumeMismatchError(
            f"--resume: the config differs from the checkpointed run's ({out / CONFIG_FILE}) in "
            f"{shown}; a resume continues the same run, start a new one in another --out instead"
        )
    if live.num_steps < restored.next_step:
        raise ResumeMismatchError(
            f"--resume: num_steps {live.num_steps} is below the checkpoint's next step "
            f"{restored.next_step}"
        )
    check_checkpoint_fits(live, restored)
    notes = []
    if not restored.had_manifest:
        notes.append(
            "the checkpoint has no manifest (written before manifests existed): its files were "
            "checked by content only"
        )
    return ResumeNote(from_step=restored.next_step, changed=differences, notes=tuple(notes))


def check_checkpoint_fits(live: LiveConfig, restored: Checkpoint) -> None:
    """The checkpoint's allocation and step counters belong to a run of this config."""
    where = restored.folder / "meta.json" if restored.folder else "the checkpoint"
    if restored.allocation not in live.candidates:
        raise CheckpointError(
            f"--resume: {where}: allocation {restored.allocation.label} is not a split of this "
            f"run ({', '.join(a.label for a in live.candidates)})"
        )
    if restored.weights_version != restored.next_step:
        raise CheckpointError(
            f"--resume: {where}: weights_version {restored.weights_version} does not match "
            f"next_step {restored.next_step}"
        )


def record_resume(out: Path, note: ResumeNote) -> Path:
    """Append the resume to `resumes.json` (a JSON list, one entry per resume)."""
    path = out / RESUMES_FILE
    entries: list[Any] = []
    if path.is_file():
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
            entries = loaded if isinstance(loaded, list) else []
        except (OSError, ValueError):
            entries = []
    entries.append(note.as_dict())
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(entries, indent=1), encoding="utf-8")
    tmp.replace(path)
    return path


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
