"""Checks that span a trace's rows: steps numbered one after another, samples of known steps.

Row-by-row validation (`validation`) cannot see these: each row is fine on its own, and only the
whole table shows a gap in the step numbers or a sample whose step has no record. A replay would
silently skip both, so strict reading refuses them at the first row concerned and lenient reading
keeps going with a note that says what was missing or dropped.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import TraceError


def check_step_numbering(
    steps: pd.DataFrame,
    *,
    source: str | None,
    unit: str = "row",
    positions: np.ndarray | None = None,
    lenient: bool = False,
) -> list[str]:
    """Steps are numbered one after another (schema v1: "consecutive"). A gap is a TraceError
    at the first step after it; in lenient mode the steps are kept and a note says where the
    gaps are (rows lenient reading dropped leave gaps of their own)."""
    numbers = steps["step"].to_numpy(np.int64)
    gaps = np.flatnonzero(np.diff(numbers) != 1)
    if not len(gaps):
        return []
    after = int(gaps[0]) + 1
    if not lenient:
        where = int(positions[after]) if positions is not None else after
        raise TraceError(
            f"steps are not consecutive: step {numbers[after]} follows step "
            f"{numbers[after - 1]} (steps are numbered one after another)",
            source=source,
            field="step",
            **{unit: where},
        )
    return [
        f"steps are not consecutive: {len(gaps)} gap(s), the first after step "
        f"{numbers[after - 1]} (next: step {numbers[after]}); the missing steps are not replayed"
    ]


def drop_orphan_samples(
    samples: pd.DataFrame,
    steps: pd.DataFrame,
    *,
    source: str | None,
    unit: str = "row",
    positions: np.ndarray | None = None,
    lenient: bool = False,
) -> tuple[pd.DataFrame, list[str]]:
    """Samples of a step the trace has no record of would be ignored unseen: a TraceError at
    the first one, or in lenient mode dropped and stated in a note (the samples of a step row
    that lenient reading dropped land here too)."""
    if len(samples) == 0:
        return samples, []
    sample_steps = samples["step"].to_numpy(np.int64)
    orphan = ~np.isin(sample_steps, steps["step"].to_numpy(np.int64))
    if not orphan.any():
        return samples, []
    first = int(np.flatnonzero(orphan)[0])
    if not lenient:
        where = int(positions[first]) if positions is not None else first
        raise TraceError(
            f"a sample of step {sample_steps[first]}, which has no step record in the trace",
            source=source,
            field="step",
            **{unit: where},
        )
    orphan_steps = np.unique(sample_steps[orphan])
    note = (
        f"{int(orphan.sum())} samples of {len(orphan_steps)} step(s) without a step record "
        f"(first: step {orphan_steps[0]}) were dropped"
    )
    return samples.loc[~orphan].reset_index(drop=True), [note]
