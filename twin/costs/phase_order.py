"""The order a resize's phases run in: dependencies first, with one error naming an unknown
dependency or a cycle (a user's cost file can state either)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from dynaresize.traces.phases import PhaseName, StrategyName


class _HasDependencies(Protocol):
    @property
    def depends_on(self) -> Sequence[PhaseName]: ...


def topological_order(
    phases: Mapping[PhaseName, _HasDependencies], *, strategy: StrategyName
) -> list[PhaseName]:
    """Phases in dependency order; a ValueError names an unknown dependency or a cycle."""
    order: list[PhaseName] = []
    state: dict[PhaseName, int] = {}

    def visit(name: PhaseName, trail: tuple[PhaseName, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = " -> ".join(p.value for p in (*trail, name))
            raise ValueError(f"resize.{strategy.value}: phases form a cycle: {cycle}")
        state[name] = 1
        for dep in phases[name].depends_on:
            if dep not in phases:
                raise ValueError(
                    f"resize.{strategy.value}.{name.value} depends on {dep.value}, "
                    "which is not a phase of this strategy"
                )
            visit(dep, (*trail, name))
        state[name] = 2
        order.append(name)

    for name in phases:
        visit(name, ())
    return order
