"""The resize-cost prior of a live run from its own setup, before it has measured a resize.

Why: without `--costs`, the twin's resize model with its default parameters is sized for large
models on GPUs (it told a tiny CPU run that a resize costs 94.9 s where the run then measured
0.04 s), so a cost-aware policy would never take the first resize. The setup of the very run
already timed, on its own hardware and with its own model, the work a resize repeats:

- an in-process strategy (`overlapped`, `host_sync`) takes roles (groups, trainer state, rollout
  engines) and syncs weights again: `roles_taken` + `first_weight_sync`;
- `stop_and_rebuild` also restarts the workers, rejoins the world group and rebuilds the model:
  `actors_started` + `world_group` + `models_built` + `roles_taken` + `first_weight_sync`.

Each strategy names those parts itself (`Strategy.setup_parts`, in `strategies/`). That sum is
the prior until the first measurement replaces it (`cost_feedback.py`); the run
folder's `resize_prior.json` says how far it was from the first measured resize, and so does the
next decision record (`prior_over_measured`): the first resize's own record is written before the
resize is measured.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PRIOR_FILE = "resize_prior.json"

SOURCE = "setup"
"""How the prior was made, for the records."""


@dataclass(frozen=True)
class ResizePrior:
    critical_s: float
    parts: tuple[str, ...]


def prior_from_setup(parts: Sequence[str], timings_s: Mapping[str, float]) -> ResizePrior | None:
    """The prior of a strategy whose resize repeats the setup's `parts` (its
    `Strategy.setup_parts`), from the setup's timings; None when a part was not timed."""
    if not parts or any(p not in timings_s for p in parts):
        return None
    return ResizePrior(critical_s=sum(float(timings_s[p]) for p in parts), parts=tuple(parts))


def prior_over_measured(prior_s: float, first_measured_s: float) -> float | None:
    """How far the prior was from the first measurement (1.0: exact; None: nothing measured)."""
    return prior_s / first_measured_s if first_measured_s > 0 else None


def write_prior_check(
    out_dir: Path, *, prior_s: float, source: str, first_measured_s: float
) -> Path:
    """`resize_prior.json`: the prior the first resize decision saw and what it then cost."""
    ratio = prior_over_measured(prior_s, first_measured_s)
    document = {
        "prior_critical_s": prior_s,
        "prior_source": source,
        "first_measured_critical_s": first_measured_s,
        "prior_over_measured": ratio,
    }
    path = Path(out_dir) / PRIOR_FILE
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    return path
