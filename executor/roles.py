"""Which worker holds which role for one allocation, and the rank maps and groups that follow.

A role map is a pure function of the allocation: trainers are the lowest worker ids, rollout
replicas the rest. So moving from 2:2 to 3:1 turns worker 2 into a trainer and moving back turns
it into a replica again; the same allocation always gives the same groups, which is what lets the
communicator cache key its groups by allocation.
"""

from __future__ import annotations

from dataclasses import dataclass

from dynaresize.policies.types import Allocation
from dynaresize.traces.phases import Role


@dataclass(frozen=True)
class RoleMap:
    """The role of every worker under one allocation: trainers first, then rollout replicas."""

    trainer_ids: tuple[int, ...]
    rollout_ids: tuple[int, ...]

    @classmethod
    def for_allocation(cls, allocation: Allocation) -> RoleMap:
        trainers = tuple(range(allocation.train_gpus))
        rollouts = tuple(range(allocation.train_gpus, allocation.total_gpus))
        return cls(trainer_ids=trainers, rollout_ids=rollouts)

    @property
    def allocation(self) -> Allocation:
        return Allocation(train_gpus=len(self.trainer_ids), rollout_gpus=len(self.rollout_ids))

    @property
    def num_trainers(self) -> int:
        return len(self.trainer_ids)

    @property
    def num_workers(self) -> int:
        return len(self.trainer_ids) + len(self.rollout_ids)

    @property
    def sync_ids(self) -> tuple[int, ...]:
        """Members of the weight-sync group: the first trainer (the source) and every replica."""
        return (self.trainer_ids[0], *self.rollout_ids)

    def role_of(self, worker_id: int) -> Role:
        return Role.TRAIN if worker_id in self.trainer_ids else Role.ROLLOUT

    def device_roles(self) -> list[Role]:
        return [self.role_of(w) for w in range(self.num_workers)]

    def trainer_rank(self, worker_id: int) -> int:
        """Data-parallel rank of a trainer (its place among the trainers)."""
        return self.trainer_ids.index(worker_id)

    def future_replicas(self, candidates: tuple[Allocation, ...]) -> tuple[int, ...]:
        """Trainers here that are rollout replicas under some of `candidates`: the only workers
        that can ever move into Rollout, the only ones worth building a resident engine for."""
        if not candidates:
            return ()
        fewest_trainers = min(c.train_gpus for c in candidates)
        return tuple(w for w in self.trainer_ids if w >= fewest_trainers)

    def arriving_trainers(self, old: RoleMap) -> tuple[int, ...]:
        """Workers that train here but did not under `old`."""
        return tuple(w for w in self.trainer_ids if w not in old.trainer_ids)
