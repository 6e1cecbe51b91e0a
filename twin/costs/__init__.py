"""Cost models of the twin, pure and vectorised, with every parameter in a pydantic model.

`CostModels` gathers the parameters of the four models (rollout, train, weight sync, resize) so a
scenario carries them as one field and a calibration can write them as one file. `load_costs`
reads a YAML file that overrides any subset of them (`--costs costs.yaml`).

What it may import: `dynaresize.policies`, `dynaresize.traces` and `dynaresize.config_io`, nothing
else of the twin: the live executor's estimates use these models too.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dynaresize.config_io import (
    ConfigError,
    deep_merge,
    format_validation_error,
    load_yaml_mapping,
)
from dynaresize.policies.types import CostSource

from .bounds import out_of_range
from .provenance import FittedOn
from .resize import ResizeCostParams
from .rollout import RolloutCostParams
from .sync import SyncCostParams
from .train import TrainCostParams

__all__ = [
    "CostModels",
    "FittedOn",
    "ResizeCostParams",
    "RolloutCostParams",
    "SyncCostParams",
    "TrainCostParams",
    "load_costs",
]


class CostModels(BaseModel):
    """Parameters of every cost model the twin uses."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    rollout: RolloutCostParams = Field(
        default_factory=RolloutCostParams, description="Rollout stage (continuous batching)."
    )
    train: TrainCostParams = Field(
        default_factory=TrainCostParams, description="Training stage and optimizer step."
    )
    sync: SyncCostParams = Field(
        default_factory=SyncCostParams, description="Trainer-to-rollout weight sync."
    )
    resize: ResizeCostParams = Field(
        default_factory=ResizeCostParams, description="Resize phase DAGs of both strategies."
    )
    cost_source: CostSource = Field(
        default=CostSource.MODEL,
        description="Where these parameters come from (model defaults or a calibration); "
        "policies see it in their observations.",
    )
    fitted_on: FittedOn | None = Field(
        default=None,
        description="The model sizes and hardware the parameters were fitted on (None: the "
        "built-in defaults); using them outside that range prints a warning.",
    )

    @model_validator(mode="after")
    def _computable(self) -> CostModels:
        problem = out_of_range(self)
        if problem is not None:
            raise ValueError(problem)
        return self

    def with_overrides(self, overrides: dict[str, Any]) -> CostModels:
        """A copy with `overrides` merged in field by field (nested mappings merge too)."""
        merged = deep_merge(self.model_dump(mode="json"), overrides)
        return CostModels.model_validate(merged)


def load_costs(path: str | os.PathLike[str], base: CostModels | None = None) -> CostModels:
    """Cost parameters from a YAML file overriding any subset of `base` (defaults if None).

    A file that does not say otherwise is taken as calibrated: that is what such files are for.
    """
    overrides = load_yaml_mapping(os.fspath(path))
    overrides.setdefault("cost_source", CostSource.CALIBRATED.value)
    try:
        return (base or CostModels()).with_overrides(overrides)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, str(path))) from None
