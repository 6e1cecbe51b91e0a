"""The driver's handle on the workers: calls, waits, and what a lost worker means.

Every remote call goes through `Runtime.gather`, which waits on the calls as a set and, when a
worker process has died, raises `WorkerLostError` naming the worker, its role and the step in
flight, so the driver can stop cleanly instead of hanging or losing the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, WorkerCrashedError

from dynaresize.traces.phases import Role

from .config import LiveConfig, RolloutEngines
from .roles import RoleMap

_LOST = (RayActorError, ActorDiedError, ActorUnavailableError, WorkerCrashedError)


class WorkerLostError(RuntimeError):
    """A worker process died (killed, crashed, out of memory) while the run needed it."""

    def __init__(self, *, worker_id: int, role: str, step: int, doing: str, cause: str) -> None:
        self.worker_id, self.role, self.step, self.doing = worker_id, role, step, doing
        super().__init__(
            f"worker {worker_id} ({role}) was lost during step {step} while {doing}: {cause}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "role": self.role,
            "step": self.step,
            "doing": self.doing,
        }


@dataclass
class Runtime:
    """Workers, the current role map, and the run's clock."""

    config: LiveConfig
    workers: list[Any]
    roles: RoleMap
    start_wall: float
    step: int = 0
    weights_version: int = 0

    def clock(self) -> float:
        """Seconds since the run started (the records' time base)."""
        return time.perf_counter() - self.start_wall

    def call(self, worker_ids: Iterable[int], method: str, *args: Any, **kwargs: Any) -> dict:
        """Start `method` on each worker; returns {worker_id: ObjectRef}."""
        return {w: getattr(self.workers[w], method).remote(*args, **kwargs) for w in worker_ids}

    def call_each(self, calls: dict[int, tuple[tuple, dict]], method: str) -> dict:
        """Start `method` with per-worker arguments: {worker_id: (args, kwargs)}."""
        return {w: getattr(self.workers[w], method).remote(*a, **k) for w, (a, k) in calls.items()}

    def gather(self, refs: dict[int, Any], *, doing: str) -> dict[int, Any]:
        """Wait for every call; a dead worker raises WorkerLostError, the others' errors re-raise.

        Waits on the set so that the first failure is seen at once, even while other calls
        (blocked in a collective with the dead worker) would never return.
        """
        pending = {ref: w for w, ref in refs.items()}
        results: dict[int, Any] = {}
        deadline = time.monotonic() + self.config.worker_timeout_s
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            if not ready:
                if time.monotonic() > deadline:
                    waiting = sorted(pending.values())
                    raise TimeoutError(f"workers {waiting} did not finish {doing} in time")
                continue
            for ref in ready:
                worker_id = pending.pop(ref)
                try:
                    results[worker_id] = ray.get(ref)
                except _LOST as err:
                    raise self._lost(worker_id, doing, err) from None
                except Exception:
                    # A peer of a dead worker fails its collective first; report the dead one.
                    self._raise_if_a_worker_died(pending, doing)
                    raise
        return results

    def _lost(self, worker_id: int, doing: str, err: BaseException) -> WorkerLostError:
        return WorkerLostError(
            worker_id=worker_id,
            role=self.roles.role_of(worker_id).value,
            step=self.step,
            doing=doing,
            cause=type(err).__name__,
        )

    def _raise_if_a_worker_died(self, pending: dict, doing: str, wait_s: float = 15.0) -> None:
        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=wait_s)
        for ref in ready:
            try:
                ray.get(ref)
            except _LOST as err:
                raise self._lost(pending[ref], doing, err) from None
            except Exception:
                continue
        for worker_id, actor in enumerate(self.workers):
            try:
                ray.get(actor.__ray_ready__.remote(), timeout=wait_s)
            except _LOST as err:
                raise self._lost(worker_id, doing, err) from None
            except Exception:
                continue

    def run(self, worker_ids: Iterable[int], method: str, *, doing: str, **kwargs: Any) -> dict:
        """call + gather."""
        return self.gather(self.call(worker_ids, method, **kwargs), doing=doing)

    def form_world(self, *, master_addr: str) -> None:
        """Every worker joins one new world process group, rendezvous at worker 0's free port."""
        port = self.run([0], "rendezvous_port", doing="finding a rendezvous port")[0]
        self.run(
            self.all_ids,
            "join_world",
            doing="joining the world group",
            master_addr=master_addr,
            master_port=port,
            world_size=len(self.workers),
        )

    def take_roles(
        self, *, weights_version: int, lap: Callable[[str], None] = lambda _name: None
    ) -> None:
        """The current role map's groups, every worker's role in it, and the trainers' ranks.

        With resident rollout engines the trainers build theirs here too. `lap(name)` marks the
        end of the roles ("roles_taken") and of the resident engines ("resident_engines_built").
        """
        roles = self.roles
        self.run(self.all_ids, "bind_groups", doing="building groups", roles=roles)
        for role, ids in ((Role.TRAIN, roles.trainer_ids), (Role.ROLLOUT, roles.rollout_ids)):
            self.run(
                ids, "set_role", doing="taking a role", role=role, weights_version=weights_version
            )
        lap("roles_taken")
        if self.config.rollout_engines is RolloutEngines.RESIDENT:
            self.run(
                roles.trainer_ids, "prebuild_rollout_engine", doing="building resident engines"
            )
            lap("resident_engines_built")
        self.run(roles.trainer_ids, "bind_trainer_rank", doing="binding trainer ranks")

    @property
    def all_ids(self) -> tuple[int, ...]:
        return tuple(range(len(self.workers)))
