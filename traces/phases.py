"""The one vocabulary for roles and resize phases, shared by the twin's cost model, the live
executor's resize strategies and the records both write. Names are a contract: extend, never rename.
"""

from __future__ import annotations

from enum import Enum


class Role(str, Enum):
    TRAIN = "train"
    ROLLOUT = "rollout"


class PhaseName(str, Enum):
    """A named piece of work inside a resize (see docs/architecture.md for the DAG)."""

    STATE_EXPORT = "state_export"
    """Leaving trainers hand their weights and optimizer shards out of the device."""
    WORKER_REINIT = "worker_reinit"
    """Workers change role: teardown and recreation (stop-and-rebuild) or in-process switch."""
    ROLLOUT_REINIT = "rollout_reinit"
    """The rollout side gains or loses engine replicas and rebuilds its manager."""
    WEIGHT_RESTORE = "weight_restore"
    """Remaining and arriving trainers load the weights of their new shards."""
    COMM_PREWARM = "comm_prewarm"
    """Process groups for the new topology are created and warmed with a small collective."""
    POSTPROCESS = "postprocess"
    """Bookkeeping after a resize: rank maps, data-loader resharding, rollout manager update."""
    WEIGHT_SYNC = "weight_sync"
    """Trainers push the current weights to the (new set of) rollout replicas."""
    OPTIMIZER_RESTORE = "optimizer_restore"
    """Optimizer state reaches its new shards; deferred past the boundary when overlapped."""
    ROLLOUT_DRAIN = "rollout_drain"
    """Async pipelines only: in-flight samples on leaving rollout GPUs are finished or aborted."""
    ROLLOUT_RELEASE = "rollout_release"
    """Replicas that leave Rollout release their engine (destroyed, put to sleep, or kept, as
    the run's `rollout_engine.release` says). Optional: traces without it stay valid."""
    ACTIVATE = "activate"
    """Lending within a step: the sleeping rollout replicas on the trainers' GPUs wake and load
    the current weights, then join the rollout load balancer."""
    DEACTIVATE = "deactivate"
    """Lending within a step: the lent replicas leave the load balancer, their in-flight
    requests are aborted (and resumed elsewhere), and they sleep, returning the GPUs to
    training."""


class PipelineMode(str, Enum):
    """How rollout and training share the GPUs and overlap in time: one name in configs, the
    twin's pipeline, the live executor and the trace's `RunMeta.pipeline_mode`."""

    SYNC = "sync"
    """Separate Rollout and Training GPUs; rollout of batch k, then training on it, then weight
    sync: nothing overlaps."""
    ONE_STEP_OFF = "one_step_off"
    """Separate GPUs; rollout of batch k+1 (weights of version k) overlaps training on batch k,
    then weights sync (veRL's one-step-off baseline, the paper's)."""
    ASYNC = "async"
    """Separate GPUs; rollout streams batches back to back, at most `max_staleness_steps` weight
    versions old."""
    COLOCATED = "colocated"
    """Every GPU takes both roles in turn (veRL's hybrid engine): generate, then train. Traces
    record it; the twin and the executor run disaggregated pipelines only."""

    @classmethod
    def _missing_(cls, value: object) -> PipelineMode | None:
        """Trace schema v1 spelled two modes differently; old traces keep reading."""
        return _PIPELINE_MODE_ALIASES.get(str(value))


_PIPELINE_MODE_ALIASES = {
    "sync_disaggregated": PipelineMode.SYNC,
    "fully_async": PipelineMode.ASYNC,
}


class StrategyName(str, Enum):
    """How a resize is carried out; the same names in the twin and the executor."""

    STOP_AND_REBUILD = "stop_and_rebuild"
    """Tear the actors down, checkpoint through disk, recreate them and their groups."""
    OVERLAPPED = "overlapped"
    """Workers switch role in-process; communicator reuse, bounded staging, deferred optimizer."""
    HOST_SYNC = "host_sync"
    """Workers switch role in-process; state moves synchronously through host memory, every phase
    on the critical path (the simple, correct baseline of the live executor)."""


class TransferPath(str, Enum):
    """The way one piece of state travels from the worker that holds it to the one that will,
    as the executor chooses it and the twin prices it."""

    SHM = "shm"
    """Through bounded host buffers in shared memory: both workers on one node."""
    NETWORK = "network"
    """Point to point over the network (gloo on CPU, NCCL on GPUs): workers on different nodes."""
    DEVICE = "device"
    """GPU to GPU (NCCL send/recv), no host copy: two GPUs of one node."""
