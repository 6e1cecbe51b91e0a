"""The configuration of one `dynaresize run`: a twin scenario plus live and output settings.

`--config NAME` picks a config shipped in `dynaresize/configs/` (`example`, `paper`); anything
else is read as a path to a YAML file. A config with a `live:` section is read as a
`LiveRunConfig` (`dynaresize/live_run_config.py`), which brings in the executor's settings; one
without (every twin scenario) is a plain `RunConfig` and imports none of the executor.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dynaresize.config_io import (
    ConfigError,
    deep_merge,
    format_validation_error,
    load_yaml_mapping,
)
from dynaresize.twin.config import ScenarioConfig

if TYPE_CHECKING:
    from dynaresize.executor.config import LiveConfig

BUILTIN_CONFIG_DIR = Path(__file__).resolve().parent / "configs"


class OutputConfig(BaseModel):
    """Where and what a run writes."""

    model_config = ConfigDict(extra="forbid")

    runs_dir: str = Field(
        default="runs",
        description="Parent folder of timestamped run folders when --out is not given.",
    )
    timeline_svg: bool = Field(
        default=True, description="Draw timeline.svg (step times and the split) beside the tables."
    )
    timeline_png: bool = Field(
        default=False,
        description="Also draw timeline.png with matplotlib (about a second more than the SVG).",
    )


class RunConfig(ScenarioConfig):
    """A scenario plus the settings only a run needs."""

    if TYPE_CHECKING:
        live: LiveConfig | None
    else:
        live: None = Field(
            default=None,
            description="Live-executor settings (used by --mode live only); set only in a "
            "LiveRunConfig, the form of a config that has this section.",
        )
    output: OutputConfig = Field(default_factory=OutputConfig, description="Output settings.")


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
