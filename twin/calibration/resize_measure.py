"""How a resize's critical path is read from records, in one place for calibration and validation.

Two readings: the stall the steps show (the gap between the last step on the old split and the
first on the new one, which is what a resize costs the run) and what the recorded phases account
for of it (from the first phase's start to the last critical phase's end). The difference is time
outside every phase: the driver's round trips to the workers and the records written at the
boundary.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["critical_phase_spans", "measured_critical_paths", "step_boundaries"]


def step_boundaries(steps: pd.DataFrame) -> pd.DataFrame:
    """Each boundary between consecutive steps (in start order): the step before it, the gap
    from its end to the next step's start (s) and the resize the next step records (NaN if
    none)."""
    ordered = steps.sort_values("start_s", kind="stable")
    start_s = ordered["start_s"].to_numpy(np.float64)
    end_s = ordered["end_s"].to_numpy(np.float64)
    return pd.DataFrame(
        {
            "step": ordered["step"].to_numpy()[:-1],
            "gap_s": start_s[1:] - end_s[:-1],
            "resize_id": ordered["resize_id"].to_numpy()[1:],
        }
    )


def measured_critical_paths(steps: pd.DataFrame) -> pd.DataFrame:
    """Per resize: the gap between the step before it and the first step after it (s)."""
    boundaries = step_boundaries(steps)
    resized = boundaries[boundaries["resize_id"].notna()]
    return pd.DataFrame(
        {
            "resize_id": resized["resize_id"].astype(np.int64).to_numpy(),
            "step": resized["step"].astype(np.int64).to_numpy(),
            "critical_s": resized["gap_s"].to_numpy(np.float64),
        },
        columns=["resize_id", "step", "critical_s"],
    )


def critical_phase_spans(phases: pd.DataFrame) -> dict[int, float]:
    """Per resize: from the first phase's start to the last critical phase's end (s).

    What the recorded phases account for of the stall; the gap between the steps can only be
    longer (the policy call and the records flushed at the boundary are in it too).
    """
    if len(phases) == 0:
        return {}
    spans = {}
    for resize_id, group in phases.groupby("resize_id"):
        critical = group[group["critical"].astype(bool)]
        if len(critical):
            spans[int(resize_id)] = float(critical["end_s"].max() - group["start_s"].min())
    return spans
