"""The `live.placement` section: which node each worker lives on, and which splits nodes allow.

Checked with the rest of the `live:` section, before Ray or torch start (this module needs
neither). Workers are numbered node by node (the workers of one node have consecutive ids), and
trainers are the lowest ids, so a split whose boundary falls between two nodes gives the rollout
role whole nodes; `splits: whole_nodes` keeps the candidate splits to those.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dynaresize.policies.types import Allocation


class PlacementStrategy(str, Enum):
    """How Ray spreads the workers' bundles over the nodes when `nodes` does not pin them."""

    PACK = "pack"
    """As few nodes as possible (what a job on whole 8-GPU nodes wants)."""
    SPREAD = "spread"
    """As many nodes as possible."""


class SplitRule(str, Enum):
    """Which train:rollout splits the nodes allow."""

    ANY = "any"
    """Every split of the workers."""
    WHOLE_NODES = "whole_nodes"
    """Only splits whose boundary falls between two nodes: rollout holds whole nodes (the last
    ones), training the first ones."""


class NodeSlot(BaseModel):
    """Workers pinned to one node, found by a resource only that node has."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resource: str = Field(
        min_length=1,
        description="A resource only this node has: a custom one given to `ray start "
        "--resources`, or Ray's own `node:<ip>`.",
    )
    num_workers: int = Field(ge=1, description="Workers on this node.")
    units_per_worker: float = Field(
        default=1.0,
        gt=0,
        description="Units of `resource` each worker takes (0.001 for Ray's `node:<ip>`, which "
        "has one unit).",
    )


class PlacementSettings(BaseModel):
    """Where the workers go: pinned node by node, or spread by Ray and recorded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    strategy: PlacementStrategy = Field(
        default=PlacementStrategy.PACK,
        description="pack or spread: Ray's placement of the bundles when `nodes` is empty.",
    )
    nodes: tuple[NodeSlot, ...] = Field(
        default=(),
        description="Pin workers node by node, in worker-id order (the first slot's workers "
        "get the lowest ids); empty: Ray places them and the run records where.",
    )
    splits: SplitRule = Field(
        default=SplitRule.ANY,
        description="any, or whole_nodes: only splits at node boundaries (needs `nodes`).",
    )

    @model_validator(mode="after")
    def _whole_nodes_need_nodes(self) -> PlacementSettings:
        if self.splits is SplitRule.WHOLE_NODES and not self.nodes:
            raise ValueError(
                "placement.splits: whole_nodes needs placement.nodes (the workers of each node)"
            )
        resources = [slot.resource for slot in self.nodes]
        repeated = sorted({r for r in resources if resources.count(r) > 1})
        if repeated:
            raise ValueError(f"placement.nodes: resource {repeated[0]!r} names more than one slot")
        return self

    @property
    def node_boundaries(self) -> tuple[int, ...]:
        """Worker counts at which one pinned node ends and the next begins."""
        ends, total = [], 0
        for slot in self.nodes[:-1]:
            total += slot.num_workers
            ends.append(total)
        return tuple(ends)

    def allows(self, allocation: Allocation) -> bool:
        """Whether the split keeps to the rule (every split does under `any`)."""
        if self.splits is SplitRule.ANY:
            return True
        return allocation.train_gpus in self.node_boundaries

    def check_fits(
        self, *, num_workers: int, initial: Allocation, listed: tuple[Allocation, ...]
    ) -> None:
        """The pinned workers add up to the run's, and the listed splits keep to the rule."""
        if self.nodes:
            pinned = sum(slot.num_workers for slot in self.nodes)
            if pinned != num_workers:
                raise ValueError(
                    f"placement.nodes: the slots hold {pinned} workers, num_workers is "
                    f"{num_workers}"
                )
        if self.splits is SplitRule.ANY:
            return
        sizes = "+".join(str(slot.num_workers) for slot in self.nodes)
        named = [("initial_allocation", initial), *(("candidate_allocations", a) for a in listed)]
        for name, allocation in named:
            if not self.allows(allocation):
                raise ValueError(
                    f"{name}: {allocation} cannot be placed on whole nodes of {sizes} workers "
                    f"(placement.splits: whole_nodes); splits at node boundaries: "
                    f"{', '.join(self.boundary_splits(num_workers)) or 'none'}"
                )

    def boundary_splits(self, num_workers: int) -> list[str]:
        return [f"{t}:{num_workers - t}" for t in self.node_boundaries]
