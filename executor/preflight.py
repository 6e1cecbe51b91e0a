"""Checks of a live run that need files but neither Ray nor torch, done before anything starts.

Why: a problem a worker would find (a model folder that is not there) costs a Ray start, minutes
of actor start-up and a 14-line actor traceback, and used to leave a half-written run folder.
Found here, it is one error line and nothing is written. `run_live` calls `check_before_start`
before the cluster starts and before it creates or writes anything in the run folder.
"""

from __future__ import annotations

from pathlib import Path

from dynaresize.config_io import ConfigError

from .config import LiveConfig


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
