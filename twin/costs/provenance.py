"""Where a set of cost parameters comes from, and where it may be trusted.

Fitted parameters hold for the models and hardware they were fitted on: a resize fitted on
0.5-1.5B models says little about an 8B one. A cost file records that range (`FittedOn`); using
it outside prints a warning naming the range. `dynaresize calibrate` also stamps every section it
writes with a digest of its content, so `validate` can tell a file calibrate wrote (or sections
of several such files put together) from one written or edited by hand.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

CALIBRATE = "dynaresize calibrate"
"""`FittedOn.written_by` of the files `dynaresize calibrate` writes."""


class FittedOn(BaseModel):
    """The runs a cost file was fitted on."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    written_by: str = Field(
        description="What fitted the file: 'dynaresize calibrate', a benchmark."
    )
    model_params_b_min: float = Field(gt=0, description="Smallest model fitted on (B params).")
    model_params_b_max: float = Field(gt=0, description="Largest model fitted on (B params).")
    hardware: str | None = Field(default=None, description="Accelerators and links, free text.")
    traces: list[str] = Field(default_factory=list, description="Traces or runs it was fitted to.")
    digests: dict[str, str] = Field(
        default_factory=dict,
        description="sha256 of each section (rollout, train, sync, resize) as calibrate wrote "
        "it; a section edited afterwards no longer matches.",
    )

    def range_text(self) -> str:
        low, high = self.model_params_b_min, self.model_params_b_max
        size = f"{low:g}B" if low == high else f"{low:g}-{high:g}B"
        return f"{size} models" + (f" on {self.hardware}" if self.hardware else "")


RANGE_SLACK = 0.25
"""A model within this share of the fitted range's ends still counts as inside it."""


def outside_range_warning(fitted_on: FittedOn | None, model_params_b: float) -> str | None:
    """A warning when costs fitted on some model sizes are applied to a size well outside."""
    if fitted_on is None:
        return None
    low = fitted_on.model_params_b_min * (1 - RANGE_SLACK)
    high = fitted_on.model_params_b_max * (1 + RANGE_SLACK)
    if low <= model_params_b <= high:
        return None
    return (
        f"warning: the cost parameters were fitted on {fitted_on.range_text()} "
        f"({fitted_on.written_by}); applied to a {model_params_b:g}B model they are "
        "extrapolated: calibrate on runs of this model size to trust them"
    )


def section_digest(section: Any) -> str:
    """sha256 of one section of a cost file (canonical JSON)."""
    text = json.dumps(section, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


STAMP_FREE_KEYS = ("cost_source", "fitted_on")
"""Keys of a cost file that are not fitted sections."""


def stamped(mapping: dict[str, Any], fitted_on: FittedOn) -> dict[str, Any]:
    """`mapping` with `fitted_on` holding a digest of each of its sections."""
    digests = {k: section_digest(v) for k, v in mapping.items() if k not in STAMP_FREE_KEYS}
    stamp = fitted_on.model_copy(update={"digests": digests}).model_dump(mode="json")
    return {**mapping, "fitted_on": stamp}


def written_by_calibrate(mapping: dict[str, Any]) -> str | None:
    """None when every section of the mapping is as `dynaresize calibrate` wrote it; otherwise
    why not."""
    fitted = mapping.get("fitted_on")
    if not isinstance(fitted, dict) or fitted.get("written_by") != CALIBRATE:
        return "it has no fitted_on stamp of dynaresize calibrate"
    digests = fitted.get("digests") or {}
    sections = [k for k in mapping if k not in STAMP_FREE_KEYS]
    if not sections:
        return "it holds no fitted section"
    changed = [k for k in sections if digests.get(k) != section_digest(mapping[k])]
    if changed:
        return (
            f"its section(s) {', '.join(changed)} differ from what dynaresize calibrate wrote "
            "(edited, or not fitted)"
        )
    return None
