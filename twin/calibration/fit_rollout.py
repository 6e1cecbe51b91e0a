"""The rollout stage's fit: the decode and prefill rates, the contention between replicas and
the first rollout's warm-up, by bounded nonlinear least squares (scipy) on the very model the
twin runs.

For every step and replica, the counts the model needs (prefill tokens, decode iterations,
active-sequence iterations) do not depend on the fitted rates, so they are computed once; the
stage time is then the slowest replica's linear combination of them. Decode concurrency is held
at the configured KV capacity: per-step times cannot tell it apart from the other parameters.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

from dynaresize.traces.workload import Workload
from dynaresize.traces.workload_stream import WorkloadStream, workload_blocks

from ..costs import CostModels
from ..costs.rollout import RolloutCostParams, contention_factor, replica_seconds
from ..costs.rollout_kernels import replica_counts
from .stage_fit import (
    FitError,
    FitInputs,
    StageFit,
    first_steps,
    fitted_warmup_s,
    rollout_replicas_per_step,
)


def rollout_counts_by_step(
    workload: Workload | WorkloadStream, replicas: np.ndarray, max_concurrent_seqs: int | None
) -> np.ndarray:
    """(steps, max replicas, 3) integer counts: prefill tokens, iterations, active iterations.

    Replicas a step does not have are all-zero rows, which the max over replicas ignores. A
    streamed workload is counted a block of steps at a time (the counts are each step's own).
    """
    width = int(replicas.max()) if len(replicas) else 1
    out = np.zeros((workload.num_steps, width, 3), dtype=np.int64)
    for first, block in workload_blocks(workload):
        rows = slice(first, first + block.num_steps)
        _count_block(block, replicas[rows], max_concurrent_seqs, out[rows])
    return out


def _count_block(
    workload: Workload, replicas: np.ndarray, max_concurrent_seqs: int | None, out: np.ndarray
) -> None:
    """`rollout_counts_by_step` of one held block, into `out` (its rows of the result)."""
    for num_replicas in np.unique(replicas):
        counts = replica_counts(
            workload.prompt_tokens,
            workload.response_tokens,
            workload.step_offsets,
            num_replicas=int(num_replicas),
            max_concurrent_seqs=max_concurrent_seqs,
        )
        rows = np.flatnonzero(replicas == num_replicas)
        stacked = np.stack(
            [counts.prompt_tokens_total, counts.decode_iterations, counts.active_seq_iterations],
            axis=-1,
        ).reshape(workload.num_steps, int(num_replicas), 3)
        out[rows, : int(num_replicas)] = stacked[rows]


def predicted_rollout_s(
    counts: np.ndarray, params: RolloutCostParams, replicas: np.ndarray | None = None
) -> np.ndarray:
    """Stage time per step from precomputed counts: the slowest replica, stretched by the
    contention of `replicas` (the replica count of each step) where given."""
    seconds = replica_seconds(counts[..., 0], counts[..., 1], counts[..., 2], params).max(axis=1)
    if replicas is None:
        return seconds
    return seconds * contention_factor(replicas, params)


def fit_rollout(inputs: FitInputs, costs: CostModels) -> tuple[CostModels, StageFit]:
    """The three decode/prefill rates, the contention between replicas where the traces show
    several replica counts, and the first rollout's warm-up from the runs' first steps."""
    steps = inputs.steps
    has_rollout = (steps["rollout_s"].to_numpy() > 0) & (steps["num_samples"].to_numpy() > 0)
    usable = has_rollout & ~first_steps(steps)
    if usable.sum() < 3:
        raise FitError(
            f"rollout: only {int(usable.sum())} steps after the first have a rollout time and "
            "samples; at least 3 are needed"
        )
    base = costs.rollout
    all_replicas = rollout_replicas_per_step(steps, inputs.rollout_tp_size)
    all_counts = rollout_counts_by_step(inputs.workload, all_replicas, base.max_concurrent_seqs)
    counts, replicas = all_counts[usable], all_replicas[usable]
    measured = steps["rollout_s"].to_numpy(np.float64)[usable]
    fit_contention = len(np.unique(replicas)) >= 2
    scale = np.array(
        [
            max(base.decode_base_s_per_iter, 1e-3),
            max(base.decode_s_per_active_seq, 1e-5),
            max(base.prefill_s_per_token, 1e-5),
            1.0,
        ]
    )

    def with_values(x: np.ndarray) -> RolloutCostParams:
        a, b, p, *c = (x * scale[: len(x)]).tolist()
        update = {"decode_base_s_per_iter": a, "decode_s_per_active_seq": b}
        update |= {"prefill_s_per_token": p}
        if c:
            update["replica_contention_per_extra"] = c[0]
        return base.model_copy(update=update)

    def residuals(x: np.ndarray) -> np.ndarray:
        return predicted_rollout_s(counts, with_values(x), replicas) - measured

    x0 = np.array([1.0, 1.0, 1.0, base.replica_contention_per_extra][: 4 if fit_contention else 3])
    solution = least_squares(residuals, x0, bounds=(0.0, np.inf), method="trf")
    fitted = with_values(solution.x)
    first = has_rollout & first_steps(steps)
    warmup_s = fitted_warmup_s(
        steps["rollout_s"].to_numpy(np.float64)[first],
        predicted_rollout_s(all_counts[first], fitted, all_replicas[first]),
    )
    fitted = fitted.model_copy(update={"first_step_warmup_s": warmup_s})
    concurrency = fitted.max_concurrent_seqs
    assumptions = [
        "decode concurrency held at "
        + (
            f"{concurrency} sequences per replica (KV capacity "
            f"{fitted.kv_capacity_tokens_per_replica} tokens / {fitted.kv_reserved_tokens_per_seq} "
            "reserved per sequence)"
            if concurrency is not None
            else "unlimited"
        )
        + "; per-step times cannot separate it from the decode parameters",
        f"rollout replicas = rollout GPUs / tensor-parallel size {inputs.rollout_tp_size}",
        (
            f"contention between replicas fitted over {len(np.unique(replicas))} replica counts"
            if fit_contention
            else "one replica count: contention between replicas held at "
            f"{base.replica_contention_per_extra:g}"
        ),
        f"first rollout of a run: warm-up {warmup_s:.3g} s from {int(first.sum())} first steps, "
        "which the rate fit leaves out",
    ]
    fit = StageFit(
        stage="rollout",
        params={
            "decode_base_s_per_iter": fitted.decode_base_s_per_iter,
            "decode_s_per_active_seq": fitted.decode_s_per_active_seq,
            "prefill_s_per_token": fitted.prefill_s_per_token,
            "replica_contention_per_extra": fitted.replica_contention_per_extra,
            "first_step_warmup_s": warmup_s,
        },
        measured_s=measured,
        predicted_s=predicted_rollout_s(counts, fitted, replicas),
        assumptions=assumptions,
    )
    return costs.model_copy(update={"rollout": fitted}), fit
