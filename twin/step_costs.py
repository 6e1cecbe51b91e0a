"""Per-step stage times of a workload on every candidate split, computed once and vectorised.

The SimPy pipeline, the static baselines, the per-candidate predictions a policy sees and the
offline optimum all read the same three matrices, so they can never disagree on what a step costs:

- `rollout_s[k, c]`: rollout of batch k on candidate c (the rollout cost model),
- `train_s[k, c]`: training on batch k on candidate c (the train cost model),
- `sync_s[c]`: weight sync after a training step on candidate c (the sync cost model).

`step_time_matrix` turns them into the duration of every step of a run that stays on one
candidate, in the pipeline's mode, by the same recurrences the SimPy pipeline follows; a static
run's total time is the column sum, exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dynaresize.policies.types import Allocation
from dynaresize.traces.phases import PipelineMode
from dynaresize.traces.workload import Workload

from .config import ClusterConfig, ModelConfig, PipelineConfig
from .costs import CostModels
from .costs.rollout import rollout_stage_s_by_replicas
from .costs.sync import weight_sync_s
from .costs.train import train_stage_s

__all__ = [
    "StepCosts",
    "async_step_ends",
    "compute_step_costs",
    "stage_time_components",
    "static_step_times",
    "steady_step_s",
    "steady_step_s_without_warmup",
    "step_time_matrix",
    "tokens_and_response_sums",
    "tokens_per_step",
]


@dataclass(frozen=True)
class StepCosts:
    """Stage times of one workload on every candidate, in the order of `candidates`."""

    candidates: tuple[Allocation, ...]
    rollout_s: np.ndarray
    """(num_steps, num_candidates): rollout of batch k on candidate c."""
    train_s: np.ndarray
    """(num_steps, num_candidates): training on batch k on candidate c."""
    sync_s: np.ndarray
    """(num_candidates,): weight sync after each training step on candidate c."""
    step_s: np.ndarray
    """(num_steps, num_candidates): step durations of a run that stays on candidate c."""

    @property
    def num_steps(self) -> int:
        return self.rollout_s.shape[0]

    def index(self, allocation: Allocation) -> int:
        for i, cand in enumerate(self.candidates):
            if cand == allocation:
                return i
        raise KeyError(f"{allocation} is not a candidate")

    def static_totals_s(self) -> np.ndarray:
        """Total time of a static run on each candidate."""
        return self.step_s.sum(axis=0)


def tokens_per_step(workload: Workload) -> np.ndarray:
    """Prompt plus response tokens of each step (float64), equal to `Workload.tokens_per_step`.

    Steps of one size (every synthetic workload) are rows of a matrix: integer row sums, with no
    per-sample step index or float weights; ragged workloads take the general route.
    """
    return tokens_and_response_sums(workload)[0]


def tokens_and_response_sums(workload: Workload) -> tuple[np.ndarray, np.ndarray | None]:
    """`tokens_per_step`, and each step's response tokens (int64) where the steps are of one
    size (None for a ragged workload): the row sums that the tokens are made of, for a caller
    that needs them too."""
    sizes = np.diff(workload.step_offsets)
    n = workload.num_steps
    if n == 0 or not np.all(sizes == sizes[0]):
        return workload.tokens_per_step(), None
    width = int(sizes[0])
    prompt = workload.prompt_tokens.reshape(n, width).sum(axis=1)
    response = workload.response_tokens.reshape(n, width).sum(axis=1)
    return (prompt + response).astype(np.float64), response


def stage_time_components(
    workload: Workload,
    *,
    candidates: tuple[Allocation, ...] | list[Allocation],
    cluster: ClusterConfig,
    model: ModelConfig,
    costs: CostModels,
    tokens: np.ndarray | None = None,
    starts_run: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rollout_s, train_s, sync_s) of every step on every candidate.

    `tokens` (from `tokens_per_step`) may be passed by a caller that already has them.
    `starts_run` says the workload's first step is the first of a run, which pays the one-time
    warm-up; a caller costing one step in the middle of a run passes False.
    """
    num_steps = workload.num_steps
    tokens = tokens_per_step(workload) if tokens is None else tokens
    rollout = np.empty((num_steps, len(candidates)))
    train = np.empty((num_steps, len(candidates)))
    by_replicas = rollout_stage_s_by_replicas(
        workload,
        replica_counts_wanted=tuple(cluster.num_rollout_replicas(cand) for cand in candidates),
        params=costs.rollout,
    )
    for c, cand in enumerate(candidates):
        rollout[:, c] = by_replicas[cluster.num_rollout_replicas(cand)]
        train[:, c] = train_stage_s(
            tokens, train_gpus=cand.train_gpus, model=model, params=costs.train
        )
    if starts_run and num_steps:
        # The first step of a run also pays one-time warm-up, whatever the split.
        rollout[0] += costs.rollout.first_step_warmup_s
        train[0] += costs.train.first_step_warmup_s
    sync = np.array(
        [
            weight_sync_s(
                weights_gb=model.weights_gb,
                bandwidth_gbps=cluster.weight_sync_bandwidth_gbps(),
                params=costs.sync,
                num_replicas=cluster.num_rollout_replicas(cand),
            )
            for cand in candidates
        ]
    )
    return rollout, train, sync


def async_step_ends(
    rollout_s: np.ndarray, train_s: np.ndarray, sync_s: np.ndarray, *, max_staleness_steps: int
) -> np.ndarray:
    """End of each step's weight sync in async mode, for every column at once.

    Rollout produces batches back to back; batch b may start only once weights version
    b - max_staleness_steps exist (version v exists when the sync after step v-1 ends). Training
    on batch k starts when the batch is ready and the previous sync has ended.
    """
    num_steps = rollout_s.shape[0]
    shape = rollout_s.shape[1:]
    version_ready = [np.zeros(shape)]  # version_ready[v]: time weights version v exist
    rollout_free = np.zeros(shape)
    batch_ready = []
    ends = np.empty_like(rollout_s)
    next_batch = 0
    trainer_free = np.zeros(shape)
    for k in range(num_steps):
        # Launch every batch whose staleness gate is already known (needs version b - s).
        while next_batch < num_steps and next_batch - max_staleness_steps <= k:
            gate_version = max(0, next_batch - max_staleness_steps)
            start = np.maximum(rollout_free, version_ready[gate_version])
            rollout_free = start + rollout_s[next_batch]
            batch_ready.append(rollout_free)
            next_batch += 1
        train_start = np.maximum(batch_ready[k], trainer_free)
        trainer_free = train_start + train_s[k] + sync_s
        ends[k] = trainer_free
        version_ready.append(trainer_free)
    return ends


def static_step_times(
    rollout_s: np.ndarray, train_s: np.ndarray, sync_s: np.ndarray, pipeline: PipelineConfig
) -> np.ndarray:
    """Duration of each step of a run that never resizes (columns independent).

    - sync: rollout_k + train_k + sync.
    - one_step_off: max(rollout_{k+1}, train_k) + sync; step 0 also waits for the first batch,
      and the last step has no next batch to wait for.
    - async: differences of `async_step_ends`.
    """
    if pipeline.mode is PipelineMode.SYNC:
        return rollout_s + train_s + sync_s
    if pipeline.mode is PipelineMode.ONE_STEP_OFF:
        next_rollout = np.zeros_like(rollout_s)
        next_rollout[:-1] = rollout_s[1:]
        steps = np.maximum(next_rollout, train_s) + sync_s
        if len(steps):
            steps[0] += rollout_s[0]
        return steps
    ends = async_step_ends(
        rollout_s, train_s, sync_s, max_staleness_steps=pipeline.max_staleness_steps
    )
    return np.diff(ends, axis=0, prepend=np.zeros((1, *ends.shape[1:])))


def steady_step_s(
    rollout_s: np.ndarray, train_s: np.ndarray, sync_s: np.ndarray, mode: PipelineMode
) -> np.ndarray:
    """Step time once a pipeline runs steadily on batches like these (for predictions)."""
    if mode is PipelineMode.SYNC:
        return rollout_s + train_s + sync_s
    if mode is PipelineMode.ONE_STEP_OFF:
        return np.maximum(rollout_s, train_s) + sync_s
    return np.maximum(rollout_s, train_s + sync_s)


def steady_step_s_without_warmup(
    step_costs: StepCosts, costs: CostModels, mode: PipelineMode
) -> np.ndarray:
    """`steady_step_s` of every step on every candidate, leaving the run's one-time warm-up out:
    it is paid whatever the split, so what splits are compared by (policy predictions,
    break-even savings) must not contain it."""
    rollout_s, train_s = step_costs.rollout_s.copy(), step_costs.train_s.copy()
    if len(rollout_s):
        rollout_s[0] -= costs.rollout.first_step_warmup_s
        train_s[0] -= costs.train.first_step_warmup_s
    return steady_step_s(rollout_s, train_s, step_costs.sync_s, mode)


def step_time_matrix(
    workload: Workload,
    *,
    candidates: tuple[Allocation, ...] | list[Allocation],
    cluster: ClusterConfig,
    model: ModelConfig,
    costs: CostModels,
    pipeline: PipelineConfig,
) -> np.ndarray:
    """array[num_steps, num_candidates]: each step's duration on a run that stays on a candidate."""
    rollout, train, sync = stage_time_components(
        workload, candidates=candidates, cluster=cluster, model=model, costs=costs
    )
    return static_step_times(rollout, train, sync, pipeline)


def compute_step_costs(
    workload: Workload,
    *,
    cluster: ClusterConfig,
    model: ModelConfig,
    costs: CostModels,
    pipeline: PipelineConfig,
    tokens: np.ndarray | None = None,
) -> StepCosts:
    """Every stage time of `workload` on every candidate topology of the cluster."""
    candidates = tuple(cluster.candidate_allocations)
    rollout, train, sync = stage_time_components(
        workload, candidates=candidates, cluster=cluster, model=model, costs=costs, tokens=tokens
    )
    return StepCosts(
        candidates=candidates,
        rollout_s=rollout,
        train_s=train,
        sync_s=sync,
        step_s=static_step_times(rollout, train, sync, pipeline),
    )
