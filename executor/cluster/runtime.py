"""The driver's handle on the workers: calls, waits, and what a lost worker means.

A remote call names the worker method itself, not a string:

    rt.call(rt.roles.trainer_ids, LiveWorker.set_role, Role.TRAIN, weights_version=3)

so renaming, find-usages and the type checker follow it (the arguments are checked against the
method's signature, and `wait` returns what the method returns). The runtime starts the method of
that name on each worker's actor. Every wait goes through `Runtime.gather`, which waits on the
calls as a set and, when a worker process has died, raises `WorkerLostError` naming the worker,
its role and the step in flight, so the driver can stop cleanly instead of hanging or losing the
reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

import ray
from ray import ObjectRef
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, WorkerCrashedError

from dynaresize.policies.types import Allocation

from ..config import LiveConfig
from ..faults import WorkerLostError
from ..roles import RoleMap
from ..worker.actor import LiveWorker
from .ray_cluster import Cluster

P = ParamSpec("P")
R = TypeVar("R")

LOST_CHECK_S = 15.0
"""Longest wait to find which worker died after a peer's collective failed."""

_LOST = (RayActorError, ActorDiedError, ActorUnavailableError, WorkerCrashedError)


def _method_name(method: Callable[..., Any]) -> str:
    """The actor method a worker method stands for; refuses anything that is not a method."""
    owner, _, name = method.__qualname__.rpartition(".")
    if not owner or "<locals>" in owner or not name.isidentifier():
        raise TypeError(f"a remote call takes a worker method (LiveWorker.x), not {method!r}")
    return name


class Calls(Generic[R]):
    """Calls started on workers, by worker id; `wait` gathers their results."""

    def __init__(self, runtime: Runtime, refs: dict[int, ObjectRef[R]]) -> None:
        self.runtime = runtime
        self.refs = refs

    def wait(self, doing: str) -> dict[int, R]:
        """Every result by worker id; `doing` names the wait in a lost-worker or timeout error."""
        return self.runtime.gather(self.refs, doing=doing)


@dataclass
class Runtime:
    """Workers, the current role map, and the run's clock."""

    config: LiveConfig
    workers: list[Any]
    roles: RoleMap
    start_wall: float
    actor_cls: type[LiveWorker]
    """The class the workers were started from; a strategy that replaces them starts the same."""
    step: int = 0
    weights_version: int = 0
    phase: str = "setup"
    """What the driver is doing: setup, step, resize or checkpoint (for fault reports)."""
    rendezvous_file: str | None = None
    """A file for the world group's rendezvous when every worker is on the driver's machine
    (no TCP store listening anywhere); None: a TCP store at the first worker's address."""
    worlds_formed: int = 0
    """World groups formed so far (stop_and_rebuild forms a new one at every resize)."""
    worker_infos: list[dict[str, Any]] = field(default_factory=list)
    """`LiveWorker.info` of every worker as the setup found them (pids for the shutdown)."""

    @classmethod
    def for_cluster(
        cls, cluster: Cluster, config: LiveConfig, *, allocation: Allocation | None = None
    ) -> Runtime:
        """The handle on `cluster`'s workers in the roles of `allocation` (the config's initial
        split when None: a resumed run passes its checkpoint's); the run's clock starts now."""
        return cls(
            config=config,
            workers=cluster.workers,
            roles=RoleMap.for_allocation(allocation or config.initial_allocation),
            start_wall=time.perf_counter(),
            actor_cls=cluster.actor_cls,
        )

    def clock(self) -> float:
        """Seconds since the run started (the records' time base)."""
        return time.perf_counter() - self.start_wall

    def call(
        self,
        worker_ids: Iterable[int],
        method: Callable[Concatenate[Any, P], R],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Calls[R]:
        """Start the worker method `method` (e.g. `LiveWorker.train`) on each worker."""
        name = _method_name(method)
        refs = {w: getattr(self.workers[w], name).remote(*args, **kwargs) for w in worker_ids}
        return Calls(self, refs)

    def call_each(self, calls: Iterable[Calls[R]]) -> Calls[R]:
        """One set of calls from calls started worker by worker (each with its own arguments)."""
        refs: dict[int, ObjectRef[R]] = {}
        for part in calls:
            refs.update(part.refs)
        return Calls(self, refs)

    def gather(self, refs: dict[int, ObjectRef[R]], *, doing: str) -> dict[int, R]:
        """Wait for every call; a dead worker raises WorkerLostError, the others' errors re-raise.

        Waits on the set so that the first failure is seen at once, even while other calls
        (blocked in a collective with the dead worker) would never return.
        """
        pending = {ref: w for w, ref in refs.items()}
        results: dict[int, R] = {}
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
            phase=self.phase,
        )

    def _raise_if_a_worker_died(
        self, pending: dict[ObjectRef[Any], int], doing: str, wait_s: float = LOST_CHECK_S
    ) -> None:
        """Find the dead worker behind a peer's failure: within `wait_s` in all (the workers are
        asked together, so the bound does not grow with their number)."""
        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=wait_s)
        for ref in ready:
            try:
                ray.get(ref)
            except _LOST as err:
                raise self._lost(pending[ref], doing, err) from None
            except Exception:
                continue
        probes = {actor.__ray_ready__.remote(): w for w, actor in enumerate(self.workers)}
        answered, _ = ray.wait(list(probes), num_returns=len(probes), timeout=wait_s)
        for ref in answered:
            try:
                ray.get(ref)
            except _LOST as err:
                raise self._lost(probes[ref], doing, err) from None
            except Exception:
                continue

    def form_world(self, *, master_addr: str) -> None:
        """Every worker joins one new world process group: through `rendezvous_file` when set
        (one machine: nothing listens), else at a TCP store worker 0 opens on `master_addr`, its
        node's cluster address, and on no other interface."""
        init_method: str | None = None
        port = 0
        if self.rendezvous_file is not None:
            self.worlds_formed += 1  # a new file per world: a dead world's file may remain
            init_method = f"file://{self.rendezvous_file}-{self.worlds_formed}"
        else:
            port = self.call(
                [0], LiveWorker.open_rendezvous, node_ip=master_addr, world_size=len(self.workers)
            ).wait("opening the rendezvous")[0]
        self.call(
            self.all_ids,
            LiveWorker.join_world,
            master_addr=master_addr,
            master_port=port,
            world_size=len(self.workers),
            init_method=init_method,
        ).wait("joining the world group")

    @property
    def all_ids(self) -> tuple[int, ...]:
        return tuple(range(len(self.workers)))
