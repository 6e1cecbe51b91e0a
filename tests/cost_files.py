"""Cost files as `dynaresize calibrate` writes them (stamped), for tests of what reads them."""

from __future__ import annotations

from typing import Any

import yaml

from dynaresize.twin.costs.provenance import CALIBRATE, FittedOn, stamped


def calibrated_cost_text(sections: dict[str, Any], *, model_params_b: float = 8.0) -> str:
    """YAML text of `sections` stamped with calibrate's `fitted_on` (a digest per section)."""
    stamp = FittedOn(
        written_by=CALIBRATE, model_params_b_min=model_params_b, model_params_b_max=model_params_b
    )
    return yaml.safe_dump(stamped(sections, stamp), sort_keys=False)
