"""Stage-cost fitting: the twin's cost-model parameters from a trace's own measurements.

Each stage has one fitter that takes the measured steps (and the per-sample workload) and returns
new parameters with the fit quality (R², residuals) and the assumptions it had to make:

- rollout: `decode_base_s_per_iter`, `decode_s_per_active_seq` and `prefill_s_per_token` by
  bounded nonlinear least squares (scipy) on the very model the twin runs. For every step and
  replica, the counts the model needs (prefill tokens, decode iterations, active-sequence
  iterations) do not depend on those three parameters, so they are computed once; the stage time
  is then the slowest replica's linear combination of them. Decode concurrency is held at the
  configured KV capacity: per-step times cannot tell it apart from the other parameters.
- train: time against tokens, and against the number of training GPUs when the trace shows
  several allocations. With one allocation the scaling curve cannot be seen, so its efficiency is
  held at the configured value and that assumption is printed.
- sync: the fixed latency (and, if needed, the per-GB rate) so that the model's sync time matches
  the median measured one for the model's weights over the configured link.

`fit_costs` runs the fitters in order over one or more traces. It is the one place calibration
grows: a later fitter (resize phases, from resize records) joins through `extra_fitters`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, lsq_linear

from dynaresize.config_io import ConfigError
from dynaresize.policies.types import CostSource
from dynaresize.traces.io import Trace
from dynaresize.traces.schema import PipelineMode, RunMeta
from dynaresize.traces.workload import Workload

from ..analysis_context import DEFAULT_MODEL_PARAMS_B, DEFAULT_SYNC_BANDWIDTH_GBPS
from ..costs import CostModels
from ..costs.memory import ModelConfig
from ..costs.rollout import RolloutCostParams, contention_factor, replica_seconds
from ..costs.rollout_kernels import replica_counts
from ..costs.sync import SyncCostParams, weight_sync_s
from ..costs.train import (
    TrainCostParams,
    ring_traffic,
    scaling_efficiency,
    train_stage_s,
)
from ..trace_source import trace_workload


class FitError(ConfigError):
    """A trace that cannot determine the parameters asked of it (user input, exit code 2)."""


@dataclass(frozen=True)
class StageFit:
    """One stage's fitted parameters and how well they explain the measurements."""

    stage: str
    params: dict[str, float]
    measured_s: np.ndarray
    predicted_s: np.ndarray
    assumptions: list[str] = field(default_factory=list)

    @property
    def residuals_s(self) -> np.ndarray:
        """Measured minus predicted, per fitted step (s)."""
        return self.measured_s - self.predicted_s

    @property
    def num_steps(self) -> int:
        return len(self.measured_s)

    @property
    def r2(self) -> float | None:
        """Coefficient of determination; None when the measurements do not vary."""
        mean = float(self.measured_s.mean()) if self.num_steps else 0.0
        total = float(np.sum((self.measured_s - mean) ** 2))
        if self.num_steps < 2 or total <= 1e-12 * self.num_steps * max(mean * mean, 1e-12):
            return None
        return 1.0 - float(np.sum(self.residuals_s**2)) / total

    @property
    def rmse_s(self) -> float:
        return float(np.sqrt(np.mean(self.residuals_s**2))) if self.num_steps else 0.0

    @property
    def max_abs_residual_s(self) -> float:
        return float(np.max(np.abs(self.residuals_s))) if self.num_steps else 0.0

    def describe(self) -> str:
        r2 = "n/a" if self.r2 is None else f"{self.r2:.3f}"
        mean = float(self.measured_s.mean()) if self.num_steps else 0.0
        return (
            f"{self.stage}: R²={r2}, RMSE {self.rmse_s:.3g} s (mean {mean:.3g} s), "
            f"max |residual| {self.max_abs_residual_s:.3g} s over {self.num_steps} steps"
        )


@dataclass(frozen=True)
class FitInputs:
    """Measured steps of all traces together, and the context the models need."""

    steps: pd.DataFrame
    workload: Workload
    model: ModelConfig
    rollout_tp_size: int
    sync_bandwidth_gbps: float
    notes: list[str]


@dataclass(frozen=True)
class CostFit:
    """The fitted cost models and one record per fitted stage."""

    costs: CostModels
    stages: list[StageFit]
    notes: list[str]

    def stage(self, name: str) -> StageFit:
        for s in self.stages:
            if s.stage == name:
                return s
        raise KeyError(name)

    def quality_lines(self) -> list[str]:
        """Fit quality of every stage and what each fitter assumed."""
        lines = [s.describe() for s in self.stages]
        return lines + [f"assumed ({s.stage}): {a}" for s in self.stages for a in s.assumptions]

    def report_lines(self) -> list[str]:
        return self.quality_lines() + [f"note: {n}" for n in self.notes]


StageFitter = Callable[[FitInputs, CostModels], tuple[CostModels, StageFit]]
"""Given the measurements and the costs fitted so far: updated costs and this stage's fit."""


# --- gathering the inputs ---------------------------------------------------------------------


def concat_workloads(workloads: Sequence[Workload], name: str) -> Workload:
    prompts = [w.prompt_tokens for w in workloads]
    responses = [w.response_tokens for w in workloads]
    offsets = [np.zeros(1, np.int64)]
    base = 0
    for w in workloads:
        offsets.append(w.step_offsets[1:] + base)
        base += len(w.prompt_tokens)
    return Workload(
        np.concatenate(prompts) if prompts else np.zeros(0, np.int64),
        np.concatenate(responses) if responses else np.zeros(0, np.int64),
        np.concatenate(offsets).astype(np.int64),
        name,
    )


def gather_inputs(
    traces: Sequence[Trace],
    *,
    model: ModelConfig | None = None,
    rollout_tp_size: int = 1,
    sync_bandwidth_gbps: float | None = None,
    workloads: Sequence[Workload] | None = None,
) -> FitInputs:
    """Steps and workloads of every trace, with the model and links taken from config or trace.

    `workloads`, one per trace, saves rebuilding them when the caller already has them.
    """
    if not traces:
        raise FitError("no trace to fit")
    notes: list[str] = []
    if model is not None:
        traces, workloads = _traces_of_model(traces, workloads, model, notes)
    frames, per_trace = [], []
    for i, trace in enumerate(traces):
        if len(trace.steps) == 0:
            raise FitError(f"trace {i + 1} ({trace.meta.source_path or 'in memory'}) has no steps")
        frames.append(
            trace.steps.assign(
                trace_index=i, batch_rollout_gpus=batch_rollout_gpus(trace.steps, trace.meta)
            )
        )
        if workloads is None:
            workload, inferred = trace_workload(trace)
            per_trace.append(workload)
            notes += inferred
    if workloads is not None:
        per_trace = list(workloads)
    if model is None:
        known = {t.meta.model_params_b for t in traces if t.meta.model_params_b}
        if len(known) > 1:
            raise FitError(f"traces disagree on the model size ({sorted(known)} billion)")
        if known:
            size = known.pop()
        else:
            size = DEFAULT_MODEL_PARAMS_B
            notes.append(f"model size not given: assumed {size:g}B parameters")
        model = ModelConfig(num_params_b=size)
    if sync_bandwidth_gbps is None:
        sync_bandwidth_gbps = DEFAULT_SYNC_BANDWIDTH_GBPS
        notes.append(
            f"weight-sync link not given: assumed {sync_bandwidth_gbps:g} GB/s (one NVLink node)"
        )
    return FitInputs(
        steps=pd.concat(frames, ignore_index=True),
        workload=concat_workloads(per_trace, "fit"),
        model=model,
        rollout_tp_size=rollout_tp_size,
        sync_bandwidth_gbps=sync_bandwidth_gbps,
        notes=notes,
    )


def _traces_of_model(
    traces: Sequence[Trace],
    workloads: Sequence[Workload] | None,
    model: ModelConfig,
    notes: list[str],
) -> tuple[list[Trace], list[Workload] | None]:
    """The traces of the model whose stage costs are fitted.

    Stage costs belong to one model; traces of other sizes (given, say, so that resize phases see
    several sizes moved) are left out of the stage fits, and the notes say so. Traces all of one
    other size are taken as the configured model's (the config is the user's word on it).
    """
    keep = [
        i
        for i, t in enumerate(traces)
        if not t.meta.model_params_b
        or np.isclose(t.meta.model_params_b, model.num_params_b, rtol=1e-3)
    ]
    if not keep:
        sizes = sorted({t.meta.model_params_b for t in traces})
        if len(sizes) > 1:
            raise FitError(
                f"no trace is of the {model.num_params_b:g}B model the stage costs are fitted "
                f"for (the traces are of {', '.join(f'{s:g}B' for s in sizes)}); give --config "
                "with the model of one of them"
            )
        notes.append(
            f"the traces are of a {sizes[0]:g}B model; their stage costs are fitted as the "
            f"configured {model.num_params_b:g}B model's"
        )
        return list(traces), None if workloads is None else list(workloads)
    for i, t in enumerate(traces):
        if i not in keep:
            notes.append(
                f"trace {i + 1} (in the order given) is of a {t.meta.model_params_b:g}B model, "
                f"not {model.num_params_b:g}B: left out of the stage-cost fits (its resizes "
                "still count)"
            )
    kept_workloads = None if workloads is None else [workloads[i] for i in keep]
    return [traces[i] for i in keep], kept_workloads


def batch_rollout_gpus(steps: pd.DataFrame, meta: RunMeta) -> np.ndarray:
    """Rollout GPUs that generated each step's batch.

    One step off, the batch step k trains on was generated while step k-1 ran, on step k-1's
    split (the first batch on the first step's split); in the other modes a step's batch comes
    from its own split. A resize therefore shows in the rollout times one step later.
    """
    gpus = steps["rollout_gpus"].to_numpy(np.int64)
    if meta.pipeline_mode is PipelineMode.ONE_STEP_OFF and len(gpus) > 1:
        return np.concatenate([gpus[:1], gpus[:-1]])
    return gpus


def rollout_replicas_per_step(
    steps: pd.DataFrame, rollout_tp_size: int, *, of_batch: bool = True
) -> np.ndarray:
    """Rollout replicas of each step: those that generated its batch (`of_batch`) or those that
    run during it (who receive the weight sync after it). Colocated steps (no rollout GPUs)
    generate on every GPU."""
    of_batch = of_batch and "batch_rollout_gpus" in steps
    gpus = steps["batch_rollout_gpus" if of_batch else "rollout_gpus"].to_numpy(np.int64)
    gpus = np.where(gpus > 0, gpus, steps["train_gpus"].to_numpy(np.int64))
    return np.maximum(1, gpus // rollout_tp_size)


# --- rollout ----------------------------------------------------------------------------------


def rollout_counts_by_step(
    workload: Workload, replicas: np.ndarray, max_concurrent_seqs: int | None
) -> np.ndarray:
    """(steps, max replicas, 3) integer counts: prefill tokens, iterations, active iterations.

    Replicas a step does not have are all-zero rows, which the max over replicas ignores.
    """
    width = int(replicas.max()) if len(replicas) else 1
    out = np.zeros((workload.num_steps, width, 3), dtype=np.int64)
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
    return out


def predicted_rollout_s(
    counts: np.ndarray, params: RolloutCostParams, replicas: np.ndarray | None = None
) -> np.ndarray:
    """Stage time per step from precomputed counts: the slowest replica, stretched by the
    contention of `replicas` (the replica count of each step) where given."""
    seconds = replica_seconds(counts[..., 0], counts[..., 1], counts[..., 2], params).max(axis=1)
    if replicas is None:
        return seconds
    return seconds * contention_factor(replicas, params)


def first_steps(steps: pd.DataFrame) -> np.ndarray:
    """Whether each row is the first step of its run (it pays the one-time warm-up): the lowest
    step number of its trace, whatever the numbering starts at (verl counts from 1)."""
    if "trace_index" not in steps:
        return (steps["step"] == steps["step"].min()).to_numpy()
    first = steps.groupby("trace_index")["step"].transform("min")
    return (steps["step"] == first).to_numpy()


def fitted_warmup_s(measured: np.ndarray, predicted: np.ndarray) -> float:
    """One-time warm-up of a stage: the median excess of the runs' first steps over the model."""
    return max(0.0, float(np.median(measured - predicted))) if len(measured) else 0.0


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


# --- train ------------------------------------------------------------------------------------


def fit_train(inputs: FitInputs, costs: CostModels) -> tuple[CostModels, StageFit]:
    steps = inputs.steps
    # The first step after a resize carries the resize's background work, and the first step of
    # a run its warm-up (allocator growth, kernel selection): either would bias the fit.
    fresh = steps["resize_id"].isna().to_numpy() & ~first_steps(steps)
    usable = (steps["train_s"].to_numpy() > 0) & (steps["train_gpus"].to_numpy() > 0) & fresh
    if usable.sum() < 3:
        raise FitError(
            f"train: only {int(usable.sum())} steps have a training time outside a resize; "
            "at least 3 are needed"
        )
    tokens = steps["tokens"].to_numpy(np.float64)[usable]
    gpus = steps["train_gpus"].to_numpy(np.int64)[usable]
    measured = steps["train_s"].to_numpy(np.float64)[usable]
    base = costs.train
    model = inputs.model
    distinct = np.unique(gpus)
    assumptions: list[str] = []
    if len(distinct) == 1:
        fitted = _fit_train_one_allocation(tokens, int(distinct[0]), measured, base, model)
        assumptions.append(
            f"the trace shows one training allocation ({distinct[0]} GPUs): scaling efficiency "
            f"held at {base.scaling_efficiency_per_doubling:g} per doubling of GPUs and the "
            "optimizer-step rate at "
            f"{fitted.optimizer_s_per_gb_shard:g} s per GB of shard; other splits are "
            "extrapolated with that curve"
        )
    else:
        runs = steps["trace_index"].to_numpy()[usable] if "trace_index" in steps else None
        fitted, choices = _fit_train_several_allocations(
            tokens, gpus, measured, base, model, runs=runs
        )
        assumptions += choices
        assumptions.append(
            f"scaling fitted from {len(distinct)} training allocations "
            f"({', '.join(str(g) for g in distinct)} GPUs)"
        )
    aligned = train_predictions(tokens, gpus, model, fitted)
    first = (steps["train_s"].to_numpy() > 0) & (steps["train_gpus"].to_numpy() > 0)
    first &= first_steps(steps)
    warmup_s = fitted_warmup_s(
        steps["train_s"].to_numpy(np.float64)[first],
        train_predictions(
            steps["tokens"].to_numpy(np.float64)[first],
            steps["train_gpus"].to_numpy(np.int64)[first],
            model,
            fitted,
        ),
    )
    fitted = fitted.model_copy(update={"first_step_warmup_s": warmup_s})
    assumptions.append(
        f"first training step of a run: warm-up {warmup_s:.3g} s from {int(first.sum())} first "
        "steps, which the rate fit leaves out"
    )
    fit = StageFit(
        stage="train",
        params=fitted.model_dump(),
        measured_s=measured,
        predicted_s=aligned,
        assumptions=assumptions,
    )
    return costs.model_copy(update={"train": fitted}), fit


def train_predictions(
    tokens: np.ndarray, gpus: np.ndarray, model: ModelConfig, params: TrainCostParams
) -> np.ndarray:
    """The training model's time for each (tokens, training GPUs) pair, in input order."""
    out = np.empty(len(tokens), dtype=np.float64)
    for n in np.unique(gpus):
        rows = gpus == n
        out[rows] = train_stage_s(tokens[rows], train_gpus=int(n), model=model, params=params)
    return out


def _fit_train_one_allocation(
    tokens: np.ndarray,
    num_gpus: int,
    measured: np.ndarray,
    base: TrainCostParams,
    model: ModelConfig,
) -> TrainCostParams:
    """Intercept and slope against tokens. The intercept is split into the configured per-GPU
    terms (optimizer step, all-reduce, collectives), which keep their shape for extrapolating to
    other splits, and a fixed rest; where the intercept is smaller than those terms, they are
    scaled down to it."""
    design = np.column_stack([np.ones_like(tokens), tokens / max(tokens.mean(), 1.0)])
    solution = least_squares(
        lambda x: design @ x - measured, np.ones(2), bounds=(0.0, np.inf), method="trf"
    )
    intercept_s, slope_scaled = solution.x
    slope_s_per_token = slope_scaled / max(tokens.mean(), 1.0)
    efficiency = float(scaling_efficiency(num_gpus, base))
    no_tokens = base.model_copy(update={"s_per_token_one_gpu": 0.0, "fixed_overhead_s": 0.0})
    per_gpu_terms_s = float(train_stage_s(0.0, train_gpus=num_gpus, model=model, params=no_tokens))
    scale = 1.0 if intercept_s >= per_gpu_terms_s else intercept_s / per_gpu_terms_s
    return base.model_copy(
        update={
            "s_per_token_one_gpu": float(slope_s_per_token * num_gpus * efficiency),
            "fixed_overhead_s": float(max(0.0, intercept_s - per_gpu_terms_s)),
            "optimizer_s_per_gb_shard": base.optimizer_s_per_gb_shard * scale,
            "allreduce_s_per_gb": base.allreduce_s_per_gb * scale,
            "collective_s_per_gb_per_extra_gpu": base.collective_s_per_gb_per_extra_gpu * scale,
        }
    )


def _fit_train_several_allocations(
    tokens: np.ndarray,
    gpus: np.ndarray,
    measured: np.ndarray,
    base: TrainCostParams,
    model: ModelConfig,
    *,
    runs: np.ndarray | None = None,
) -> tuple[TrainCostParams, list[str]]:
    """The training curve over several allocations, and what the fit chose.

    Two choices the step times alone cannot make by least squares:

    - The optimizer shard (1/n) and a ring all-reduce (2 (n - 1) / n = 2 - 2/n) differ, beside
      the constant term, only in the sign of their 1/n part, so the times cannot say which
      cause is at work, only which sign fits. Each is tried with the other held at 0 and the
      better fit is kept: shards that shrink with more trainers, or gradients exchanged at a
      cost that grows to a plateau.
    - A per-token cost is only worth its parameter if it predicts runs it was not fitted on.
      With two or more runs, each run is predicted by a fit to the others, with and without the
      term, and the usual one-standard-error rule of cross-validation decides: the term is
      dropped unless its mean held-out error is lower than the simpler form's by more than one
      standard error of its own (a small model on a large GPU trains in time that barely follows
      the tokens, and a term fitted to run-to-run noise then mispredicts the next run).
    """
    notes = []
    with_tokens = True
    distinct_runs = np.unique(runs) if runs is not None else np.zeros(0)
    if len(distinct_runs) >= 2:
        errors = {
            flag: _leave_one_run_out_ape(tokens, gpus, measured, base, model, runs, flag)
            for flag in (True, False)
        }
        if errors[True] is not None and errors[False] is not None:
            with_mean, with_se = _mean_and_standard_error(errors[True])
            without_mean, _ = _mean_and_standard_error(errors[False])
            with_tokens = with_mean + with_se < without_mean
            notes.append(
                f"per-token cost {'kept' if with_tokens else 'dropped'}: leave-one-run-out "
                f"error {with_mean:.1%} ± {with_se:.1%} with it, {without_mean:.1%} without "
                f"(mean of {len(errors[True])} held-out runs' median errors ± one standard error; "
                "the term is kept only where it wins by more than one standard error)"
            )
    fitted, form = _best_train_form(tokens, gpus, measured, base, model, with_tokens)
    shape = "ring all-reduce, 2(n-1)/n" if form == "allreduce" else "optimizer shard, 1/n"
    notes.append(
        f"the per-GPU term is the {shape} form, the better fit of the two (with a constant they "
        "differ only in the sign of a 1/n part, so the times choose, not the cause)"
    )
    return fitted, notes


def _best_train_form(
    tokens: np.ndarray,
    gpus: np.ndarray,
    measured: np.ndarray,
    base: TrainCostParams,
    model: ModelConfig,
    with_tokens: bool,
) -> tuple[TrainCostParams, str]:
    """The better fit of the optimizer-shard and ring all-reduce forms (the first on a tie), and
    which form it is."""
    fits = {
        form: _fit_train_form(tokens, gpus, measured, base, model, with_tokens, form)
        for form in ("optimizer", "allreduce")
    }
    form = min(fits, key=lambda f: fits[f][1])
    return fits[form][0], form


def _mean_and_standard_error(values: list[float]) -> tuple[float, float]:
    """Mean and its standard error (0 for a single value)."""
    array = np.asarray(values, dtype=float)
    if len(array) < 2:
        return float(array.mean()), 0.0
    return float(array.mean()), float(array.std(ddof=1) / np.sqrt(len(array)))


def _leave_one_run_out_ape(
    tokens: np.ndarray,
    gpus: np.ndarray,
    measured: np.ndarray,
    base: TrainCostParams,
    model: ModelConfig,
    runs: np.ndarray,
    with_tokens: bool,
) -> list[float] | None:
    """Median absolute percentage error on each run of a fit to the others, one per run that can
    be held out (None if none can: the rest must still show two allocations)."""
    errors = []
    for run in np.unique(runs):
        rest = runs != run
        if len(np.unique(gpus[rest])) < 2 or rest.sum() < 4:
            continue
        fitted, _ = _best_train_form(
            tokens[rest], gpus[rest], measured[rest], base, model, with_tokens
        )
        held = ~rest
        predicted = train_predictions(tokens[held], gpus[held], model, fitted)
        errors.append(float(np.median(np.abs(predicted / measured[held] - 1.0))))
    return errors or None


def _fit_train_form(
    tokens: np.ndarray,
    gpus: np.ndarray,
    measured: np.ndarray,
    base: TrainCostParams,
    model: ModelConfig,
    with_tokens: bool,
    form: str,
) -> tuple[TrainCostParams, float]:
    """One form of the curve by bounded least squares: fixed, per token (if `with_tokens`), the
    scaling efficiency (with tokens), the optimizer shard or the ring all-reduce (`form`), and
    the collectives that grow with the rank count. Returns the parameters and the residual sum
    of squares."""
    token_scale = max(tokens.mean(), 1.0)
    scaled_tokens = tokens / token_scale
    log2_gpus = np.log2(gpus.astype(np.float64))
    per_gpu_gb = (
        model.optimizer_state_gb / gpus
        if form == "optimizer"
        else model.gradients_gb * ring_traffic(gpus)
    )
    extra_gpu_gb = model.gradients_gb * (gpus - 1)

    def unpack(x: np.ndarray) -> tuple[float, float, float, float, float]:
        if with_tokens:
            return tuple(x)
        fixed_s, per_gpu_rate, collective_rate = x
        return fixed_s, 0.0, base.scaling_efficiency_per_doubling, per_gpu_rate, collective_rate

    def predict(x: np.ndarray) -> np.ndarray:
        fixed_s, per_token_scaled, efficiency, per_gpu_rate, collective_rate = unpack(x)
        return (
            fixed_s
            + scaled_tokens * per_token_scaled / (gpus * efficiency**log2_gpus)
            + per_gpu_rate * per_gpu_gb
            + collective_rate * extra_gpu_gb
        )

    if with_tokens:
        x0 = np.array(
            [base.fixed_overhead_s, 1.0, base.scaling_efficiency_per_doubling, 0.01, 0.01]
        )
        x0[1] = max(float(np.median(measured * gpus)), 1e-6)
        bounds = ([0.0, 0.0, 0.05, 0.0, 0.0], [np.inf, np.inf, 1.0, np.inf, np.inf])
    else:
        x0 = np.array([max(float(np.median(measured)), 1e-6), 0.01, 0.01])
        bounds = ([0.0, 0.0, 0.0], [np.inf, np.inf, np.inf])
    solution = least_squares(
        lambda x: predict(x) - measured, x0, bounds=bounds, method="trf", x_scale="jac"
    )
    fixed_s, per_token_scaled, efficiency, per_gpu_rate, collective_rate = unpack(solution.x)
    fitted = base.model_copy(
        update={
            "fixed_overhead_s": float(fixed_s),
            "s_per_token_one_gpu": float(per_token_scaled / token_scale),
            "scaling_efficiency_per_doubling": float(efficiency),
            "optimizer_s_per_gb_shard": float(per_gpu_rate) if form == "optimizer" else 0.0,
            "allreduce_s_per_gb": float(per_gpu_rate) if form == "allreduce" else 0.0,
            "collective_s_per_gb_per_extra_gpu": float(collective_rate),
        }
    )
    return fitted, float(np.sum((predict(solution.x) - measured) ** 2))


# --- sync -------------------------------------------------------------------------------------


def fit_sync(inputs: FitInputs, costs: CostModels) -> tuple[CostModels, StageFit]:
    measured_all = inputs.steps["sync_s"].to_numpy(np.float64)
    has_sync = measured_all > 0
    measured = measured_all[has_sync]
    replicas = rollout_replicas_per_step(inputs.steps, inputs.rollout_tp_size, of_batch=False)[
        has_sync
    ]
    base = costs.sync
    weights_gb = inputs.model.weights_gb
    bandwidth = inputs.sync_bandwidth_gbps
    assumptions = []
    if len(measured) == 0:
        fitted = base
        assumptions.append("no step records a weight-sync time: sync parameters left unchanged")
    else:
        fitted, how = _fit_sync_params(measured, replicas, base, weights_gb, bandwidth)
        assumptions.append(how)
    predicted = np.array(
        [
            weight_sync_s(
                weights_gb=weights_gb, bandwidth_gbps=bandwidth, params=fitted, num_replicas=int(r)
            )
            for r in replicas
        ]
    )
    fit = StageFit("sync", fitted.model_dump(), measured, predicted, assumptions)
    return costs.model_copy(update={"sync": fitted}), fit


def _fit_sync_params(
    measured: np.ndarray,
    replicas: np.ndarray,
    base: SyncCostParams,
    weights_gb: float,
    bandwidth: float,
) -> tuple[SyncCostParams, str]:
    """One weight size and one link: the time of a sync to one replica is fitted (as latency,
    or as per-GB gathering where the measured time is below the configured link time), and,
    where the trace shows several replica counts, what each further receiver adds."""
    extra = replicas.astype(np.float64) - 1.0
    if len(np.unique(replicas)) >= 2:
        solution = lsq_linear(
            np.column_stack([np.ones_like(extra), extra]),
            measured,
            bounds=([0, 0], [np.inf, np.inf]),
        )
        one_replica_s, per_extra_s = (float(v) for v in solution.x)
        how = (
            f"one weight size ({weights_gb:.3g} GB) and one link ({bandwidth:g} GB/s): the sync "
            f"to one replica and each further replica's share are fitted over "
            f"{len(np.unique(replicas))} replica counts"
        )
    else:
        one_replica_s, per_extra_s = float(np.median(measured)), base.extra_replica_s_per_gb
        per_extra_s *= weights_gb
        how = (
            f"one weight size ({weights_gb:.3g} GB), one link ({bandwidth:g} GB/s) and one replica "
            "count: only the fixed latency is fitted, to the median measured sync time"
        )
    link_s = weights_gb / (bandwidth * base.link_efficiency)
    gather_part_s = weights_gb * base.gather_s_per_gb
    update: dict[str, float] = {"extra_replica_s_per_gb": per_extra_s / max(weights_gb, 1e-12)}
    if one_replica_s >= link_s + gather_part_s:
        update["latency_s"] = one_replica_s - link_s - gather_part_s
    else:
        update["latency_s"] = 0.0
        update["gather_s_per_gb"] = max(0.0, (one_replica_s - link_s) / weights_gb)
    return base.model_copy(update=update), how


# --- all together -----------------------------------------------------------------------------

STAGE_FITTERS: tuple[StageFitter, ...] = (fit_rollout, fit_train, fit_sync)


def fit_costs(
    traces: Sequence[Trace],
    *,
    base: CostModels | None = None,
    model: ModelConfig | None = None,
    rollout_tp_size: int = 1,
    sync_bandwidth_gbps: float | None = None,
    extra_fitters: Sequence[StageFitter] = (),
    workloads: Sequence[Workload] | None = None,
) -> CostFit:
    """Fit every stage's parameters to the traces; the result's costs are marked calibrated."""
    inputs = gather_inputs(
        traces,
        model=model,
        rollout_tp_size=rollout_tp_size,
        sync_bandwidth_gbps=sync_bandwidth_gbps,
        workloads=workloads,
    )
    costs = base or CostModels()
    stages = []
    for fitter in (*STAGE_FITTERS, *extra_fitters):
        costs, stage_fit = fitter(inputs, costs)
        stages.append(stage_fit)
    costs = costs.model_copy(update={"cost_source": CostSource.CALIBRATED})
    return CostFit(costs=costs, stages=stages, notes=inputs.notes)


def fitted_overrides(fit: CostFit) -> dict:
    """The part of the costs a fit determined, as a mapping `load_costs` accepts."""
    dumped = fit.costs.model_dump(mode="json")
    keep = {s.stage for s in fit.stages} & set(dumped)
    out = {k: dumped[k] for k in sorted(keep)}
    out["cost_source"] = CostSource.CALIBRATED.value
    return out
