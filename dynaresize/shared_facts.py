"""The facts a run config's `live:` section shares with its twin sections, stated once.

A config with a `live:` section describes one job twice: to the twin (cluster, pipeline,
simulation) and to the executor (live). Six facts belong to both: the number of devices, the
split the run starts on, the candidate splits, the step count, the pipeline mode and the resize
strategy. Each may be written on either side; the other side takes it. Written on both sides,
they must agree, or the config is refused naming both fields: a replay of the run's records in
the twin would otherwise model a different job from the one that ran.

The cluster's facts are always stated on the twin side (its fields are required there), so for
them the live section may only repeat them. The step count, the pipeline mode and the resize
strategy have defaults on both sides; the side that states one gives it to the other, and when
neither does the twin's default holds for both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SharedFact:
    """One fact: where the live section and the twin sections keep it."""

    live_field: str
    twin_section: str
    twin_field: str
    twin_default: Any = None
    """The twin's default, used for both sides when neither states the fact (None: required)."""
    from_twin: Callable[[dict[str, Any]], Any] | None = None
    """How to read the fact off the twin section when it is not one field (device count)."""

    @property
    def twin_path(self) -> str:
        return f"{self.twin_section}.{self.twin_field}"

    @property
    def live_path(self) -> str:
        return f"live.{self.live_field}"


def _device_count(cluster: dict[str, Any]) -> Any:
    per_node, nodes = cluster.get("gpus_per_node"), cluster.get("num_nodes", 1)
    if isinstance(per_node, int) and isinstance(nodes, int):
        return per_node * nodes
    return None


def _candidates(cluster: dict[str, Any]) -> Any:
    return cluster.get("candidate_allocations", cluster.get("candidate_topologies"))


SHARED_FACTS = (
    SharedFact("num_workers", "cluster", "gpus_per_node x num_nodes", from_twin=_device_count),
    SharedFact("initial_allocation", "cluster", "initial_allocation"),
    SharedFact("candidate_allocations", "cluster", "candidate_allocations", from_twin=_candidates),
    SharedFact("num_steps", "simulation", "num_steps", twin_default=100),
    SharedFact("pipeline", "pipeline", "mode", twin_default="one_step_off"),
    SharedFact("resize_strategy", "pipeline", "resize_strategy", twin_default="overlapped"),
)


def _twin_value(fact: SharedFact, data: dict[str, Any]) -> Any:
    section = data.get(fact.twin_section)
    if not isinstance(section, dict):
        return None
    if fact.from_twin is not None:
        return fact.from_twin(section)
    return section.get(fact.twin_field)


def fill_shared_facts(data: dict[str, Any]) -> dict[str, Any]:
    """The raw config with each shared fact copied to the side that leaves it out.

    Works on the mapping as read from YAML, before validation, so that the live section is
    validated with the facts it takes from the twin (its own checks, such as the initial split
    using every worker, then see the real figures). Values both sides state are left as they are
    for `disagreements` to compare once validated.
    """
    live = data.get("live")
    if not isinstance(live, dict):
        return data
    live = dict(live)
    out = {**data, "live": live}
    for fact in SHARED_FACTS:
        twin_value = _twin_value(fact, data)
        if fact.live_field in live:
            if twin_value is None and fact.twin_default is not None:
                section = out.get(fact.twin_section)
                section = dict(section) if isinstance(section, dict) else {}
                section[fact.twin_field] = live[fact.live_field]
                out[fact.twin_section] = section
            continue
        if twin_value is None:
            twin_value = fact.twin_default
        if twin_value is not None:
            live[fact.live_field] = twin_value
    return out


def disagreements(live: Any, scenario: Any) -> list[str]:
    """One line per shared fact whose validated values differ between the two sides."""
    twin_values = {
        "num_workers": scenario.cluster.total_gpus,
        "initial_allocation": scenario.cluster.initial_allocation,
        "candidate_allocations": tuple(scenario.cluster.candidate_allocations),
        "num_steps": scenario.simulation.num_steps,
        "pipeline": scenario.pipeline.mode,
        "resize_strategy": scenario.pipeline.resize_strategy,
    }
    problems = []
    for fact in SHARED_FACTS:
        live_value = getattr(live, fact.live_field)
        twin_value = twin_values[fact.live_field]
        if fact.live_field == "candidate_allocations":  # a set of splits: order does not matter
            live_value, twin_value = tuple(live_value), tuple(twin_value)
            differ = set(live_value) != set(twin_value)
        else:
            differ = live_value != twin_value
        if differ:
            problems.append(
                f"{fact.live_path} ({_show(live_value)}) disagrees with {fact.twin_path} "
                f"({_show(twin_value)}): state it once, or the same on both sides"
            )
    return problems


def _show(value: Any) -> str:
    if isinstance(value, tuple | list):
        return ", ".join(_show(v) for v in value)
    return str(getattr(value, "value", value))
