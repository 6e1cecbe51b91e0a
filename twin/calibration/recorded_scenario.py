"""The scenario a recorded run was run with, where its folder keeps it, and how a config differs.

A live run's folder holds its trace and, beside it, the scenario it ran (`scenario.yaml`).
Validating that run against another scenario (`--config`) answers a different question than the
user asked, so the differing fields are named and the command refuses unless told to go on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..config import ScenarioConfig, load_config

SCENARIO_FILE = "scenario.yaml"
COMPARED_SECTIONS = ("cluster", "model", "pipeline")
"""What a run's replay depends on; the workload comes from the trace, costs from the cost file."""


def recorded_scenario(trace: str | os.PathLike[str]) -> tuple[ScenarioConfig, Path] | None:
    """The scenario file beside (or inside) a trace, read, with its path; None if there is none."""
    location = Path(trace)
    for candidate in (location.parent / SCENARIO_FILE, location / SCENARIO_FILE):
        if candidate.is_file():
            return load_config(candidate), candidate
    return None


def _flat(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_flat(f"{prefix}.{key}", inner))
        return out
    return {prefix: value}


def scenario_differences(given: ScenarioConfig, recorded: ScenarioConfig) -> list[str]:
    """`field: given X, recorded Y` for every field of the compared sections that differs."""
    a = given.model_dump(mode="json")
    b = recorded.model_dump(mode="json")
    differences = []
    for section in COMPARED_SECTIONS:
        flat_a, flat_b = _flat(section, a[section]), _flat(section, b[section])
        for key in sorted(set(flat_a) | set(flat_b)):
            if flat_a.get(key) != flat_b.get(key):
                differences.append(f"{key}: given {flat_a.get(key)}, recorded {flat_b.get(key)}")
    return differences
