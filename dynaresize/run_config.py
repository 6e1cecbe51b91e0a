"""The settings of one run: a twin scenario plus output settings (`RunConfig`).

A module of its own so that `LiveRunConfig` (`dynaresize/live_run_config.py`) can extend it
while `dynaresize/config.py`, which reads config files as either form, imports both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from dynaresize.traces.chrome_trace import CHROME_TRACE_MAX_STEPS
from dynaresize.twin.config import ScenarioConfig

if TYPE_CHECKING:
    from dynaresize.executor.config import LiveConfig


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
    chrome_trace_max_steps: int | None = Field(
        default=CHROME_TRACE_MAX_STEPS,
        ge=1,
        description="Steps each trace.json shows, the first ones, so that trace viewers can "
        "open it (null: every step); the tables keep every step.",
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
