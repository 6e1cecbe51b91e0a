"""How a resize's critical path is read from records, in one place for calibration and validation.

Two readings: the stall the steps show (the gap between the last step on the old split and the
first on the new one, which is what a resize costs the run) and what the recorded phases account
for of it (from the first phase's start to the last critical phase's end). The difference is time
outside every phase: the driver's round trips to the workers and the records written at the
boundary.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["critical_phase_spans", "measured_critical_paths"]


def measured_critical_paths(steps: pd.DataFrame) -> pd.DataFrame:
    """Per resize: the gap between the step before it and the first step after it (s)."""
    ordered = steps.sort_values("start_s", kind="stable").reset_index(drop=True)
    rows = []
    for index in range(1, len(ordered)):
        resize_id = ordered["resize_id"].iloc[index]
        if pd.isna(resize_id):
            continue
        gap = float(ordered["start_s"].iloc[index] - ordered["end_s"].iloc[index - 1])
        rows.append(
            {
                "resize_id": int(resize_id),
                "step": int(ordered["step"].iloc[index - 1]),
                "critical_s": gap,
            }
        )
    return pd.DataFrame(rows, columns=["resize_id", "step", "critical_s"])


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
