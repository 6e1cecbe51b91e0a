"""A run config with a `live:` section: the executor's `LiveConfig` beside the twin scenario.

Kept apart from `dynaresize.config` so that reading a twin scenario (every `--mode sim` run of a
config without a live section) imports none of the executor. `load_run_config` reads a config
whose `live:` section is set as this class.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from dynaresize.executor.config import LiveConfig
from dynaresize.run_config import RunConfig
from dynaresize.shared_facts import disagreements, fill_shared_facts


class LiveRunConfig(RunConfig):
    """A run config whose live section is validated, and checked against the twin sections."""

    live: LiveConfig | None = Field(
        default=None, description="Live-executor settings (used by --mode live only)."
    )

    @model_validator(mode="before")
    @classmethod
    def _state_shared_facts_once(cls, data: Any) -> Any:
        """Facts the live section shares with the twin sections (dynaresize/shared_facts.py)
        may be written on either side; the other side takes them."""
        return fill_shared_facts(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _live_agrees_with_scenario(self) -> LiveRunConfig:
        if self.live is not None:
            problems = disagreements(self.live, self)
            if problems:
                raise ValueError("; ".join(problems))
        return self
