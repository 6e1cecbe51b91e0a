"""Checks and reads of a live run's inputs, done before Ray or any worker starts.

Why: a problem a worker would find (a model folder that is not there) costs a Ray start, minutes
of actor start-up and a 14-line actor traceback, and used to leave a half-written run folder.
Found here, it is one error line and nothing is written. `run_live` calls `prepare_run` before
the cluster starts and before it creates or writes anything in the run folder: the resume
against its checkpoint, the export target, the model folder, the prompt source (read and
tokenized once, here) and its position on a resume, the cost file, the rollout engine's extra.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dynaresize.config_io import ConfigError

from .config import LiveConfig
from .engines.config import require_engine_installed
from .job.hf_folder import inspect_model_folder
from .job.live_job import check_export_target, prepare_prompt_source, restore_prompt_position
from .job.prompt_source import PromptSource
from .run_folder.checkpoint import Checkpoint
from .run_folder.resume_check import ResumeNote, check_resume


def check_model_source(live: LiveConfig) -> None:
    """A model loaded from `model.path` needs a folder holding a saved model's config.json."""
    path = live.model.path
    if path is None:
        return
    if not Path(path).exists():
        raise ConfigError(f"live.model.path: {path} does not exist")
    if not Path(path).is_dir():
        raise ConfigError(f"live.model.path: {path} is not a folder")
    if not (Path(path) / "config.json").is_file():
        raise ConfigError(f"live.model.path: no config.json in {path} (not a saved model folder)")


def check_before_start(live: LiveConfig) -> None:
    """Everything about a live run's inputs that can be known before Ray starts."""
    check_model_source(live)
    if live.replay_batches_from is not None and not Path(live.replay_batches_from).is_dir():
        raise ConfigError(f"live.replay_batches_from: {live.replay_batches_from} is not a folder")


@dataclass(frozen=True)
class PreparedRun:
    """What the checks read that the run goes on with."""

    prompts: PromptSource
    resume_note: ResumeNote | None
    """What a resume changes (allowed fields only); None for a fresh run."""


def prepare_run(
    live: LiveConfig,
    out: Path,
    restored: Checkpoint | None,
    *,
    export_hf: str | Path | None,
    costs: str | Path | None,
) -> PreparedRun:
    """Every check and read of the run's inputs, in the order a user would fix them."""
    resume_note = check_resume(live, out, restored) if restored is not None else None
    check_before_start(live)
    if live.export_hf_dir is not None:
        check_export_target(
            export_hf if export_hf is not None else live.export_hf_dir,
            option="--export-hf" if export_hf is not None else "live.export_hf_dir:",
        )
        assert live.model.path is not None  # LiveConfig requires it with export_hf_dir
        inspect_model_folder(live.model.path)  # its tokenizer is exported with the policy
    prompts = prepare_prompt_source(live)
    if restored is not None:
        restore_prompt_position(
            prompts,
            restored.prompt_source,
            next_batch_id=restored.next_step + (1 if restored.pending_batch else 0),
        )
    if costs is not None and not Path(costs).is_file():
        raise FileNotFoundError(costs)
    require_engine_installed(live.rollout_engine, field="live.rollout_engine")
    return PreparedRun(prompts=prompts, resume_note=resume_note)
