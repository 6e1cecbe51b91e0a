"""The configuration of one `dynaresize run`: a twin scenario plus live and output settings.

`--config NAME` picks a config shipped in `dynaresize/configs/` (`example`, `paper`); anything
else is read as a path to a YAML file. A config with a `live:` section is read as a
`LiveRunConfig` (`dynaresize/live_run_config.py`), which brings in the executor's settings; one
without (every twin scenario) is a plain `RunConfig` and imports none of the executor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dynaresize.config_io import (
    ConfigError,
    deep_merge,
    format_validation_error,
    load_yaml_mapping,
)
from dynaresize.run_config import OutputConfig, RunConfig

__all__ = ["BUILTIN_CONFIG_DIR", "OutputConfig", "RunConfig", "load_run_config"]

BUILTIN_CONFIG_DIR = Path(__file__).resolve().parent / "configs"


TWIN_ONLY_PIPELINE_FIELDS = ("lending", "partial_rollout")
"""Pipeline options the twin models and the live executor does not carry out yet."""


def refuse_twin_only_options(config: RunConfig) -> None:
    """A live run of a config that lends the trainers' GPUs within a step, or keeps partial
    rollouts, is refused with one line naming the field: the executor would silently run
    without them, and its records would not be the run the twin predicted."""
    for name in TWIN_ONLY_PIPELINE_FIELDS:
        if getattr(config.pipeline, name):
            raise ConfigError(
                f"pipeline.{name}: the live executor does not carry it out yet (the twin "
                f"does: --mode sim or replay); set pipeline.{name}: false for --mode live"
            )


def builtin_config_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_CONFIG_DIR.glob("*.yaml"))


def resolve_config_path(name_or_path: str) -> Path:
    """A built-in config's file for a bare name such as `example`, else the path as given."""
    builtin = BUILTIN_CONFIG_DIR / f"{name_or_path}.yaml"
    if (
        "/" not in name_or_path
        and not name_or_path.endswith((".yaml", ".yml"))
        and builtin.is_file()
    ):
        return builtin
    path = Path(name_or_path)
    if not path.exists():
        raise ConfigError(
            f"{name_or_path}: no such config file, and not a built-in config "
            f"({', '.join(builtin_config_names())})"
        )
    return path


def load_run_config(name_or_path: str, *, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Load, apply nested `overrides` (e.g. from command-line options) and validate."""
    path = resolve_config_path(name_or_path)
    data = load_yaml_mapping(path)
    if overrides:
        data = deep_merge(data, overrides)
    try:
        if data.get("live") is None:
            return RunConfig.model_validate(data)
        from dynaresize.live_run_config import LiveRunConfig

        return LiveRunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, str(path))) from None
