"""What every stage fitter shares: the measurements of all traces together, the result type
with its fit quality, and the per-step readings the fitters agree on (which rollout GPUs made a
step's batch, which steps are a run's first and pay its warm-up).

A stage fitter is a function of the gathered inputs and the costs fitted so far that returns the
updated costs and its `StageFit` (`StageFitter`); `fit.fit_costs` runs them in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from dynaresize.config_io import ConfigError
from dynaresize.traces.io import Trace
from dynaresize.traces.phases import PipelineMode
from dynaresize.traces.schema import RunMeta
from dynaresize.traces.workload import Workload
from dynaresize.traces.workload_stream import WorkloadStream

from ..analysis_context import DEFAULT_MODEL_PARAMS_B, DEFAULT_SYNC_BANDWIDTH_GBPS
from ..costs import CostModels
from ..costs.memory import ModelConfig
from ..trace_source import trace_workload
from .fit_quality import FitQuality


class FitError(ConfigError):
    """A trace that cannot determine the parameters asked of it (user input, exit code 2)."""


@dataclass(frozen=True, kw_only=True)
class StageFit(FitQuality):
    """One stage's fitted parameters and how well they explain the measurements (one point per
    fitted step)."""

    stage: str
    params: dict[str, float]
    assumptions: list[str] = field(default_factory=list)

    @property
    def num_steps(self) -> int:
        return self.num_points

    def describe(self) -> str:
        r2 = "n/a" if self.r2 is None else f"{self.r2:.3f}"
        return (
            f"{self.stage}: R²={r2}, RMSE {self.rmse_s:.3g} s (mean {self.mean_s:.3g} s), "
            f"max |residual| {self.max_abs_residual_s:.3g} s over {self.num_steps} steps"
        )


@dataclass(frozen=True)
class FitInputs:
    """Measured steps of all traces together, and the context the models need."""

    steps: pd.DataFrame
    workload: Workload | WorkloadStream
    """Every sample of the steps: held, or one trace's samples file read a block at a time."""
    model: ModelConfig
    rollout_tp_size: int
    sync_bandwidth_gbps: float
    notes: list[str]


StageFitter = Callable[[FitInputs, CostModels], tuple[CostModels, StageFit]]
"""Given the measurements and the costs fitted so far: updated costs and this stage's fit."""


def concat_workloads(
    workloads: Sequence[Workload | WorkloadStream], name: str
) -> Workload | WorkloadStream:
    """The workloads one after the other; one stream stays a stream (renamed), several are
    read whole to be joined."""
    if len(workloads) == 1 and isinstance(workloads[0], WorkloadStream):
        return replace(workloads[0], name=name)
    held = [w.held() if isinstance(w, WorkloadStream) else w for w in workloads]
    prompts = [w.prompt_tokens for w in held]
    responses = [w.response_tokens for w in held]
    offsets = [np.zeros(1, np.int64)]
    base = 0
    for w in held:
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
    workloads: Sequence[Workload | WorkloadStream] | None = None,
) -> FitInputs:
    """Steps and workloads of every trace, with the model and links taken from config or trace.

    `workloads`, one per trace, saves rebuilding them when the caller already has them.
    """
    if not traces:
        raise FitError("no trace to fit")
    notes: list[str] = []
    if model is not None:
        traces, workloads = _traces_of_model(traces, workloads, model, notes)
    frames: list[pd.DataFrame] = []
    per_trace: list[Workload | WorkloadStream] = []
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
    workloads: Sequence[Workload | WorkloadStream] | None,
    model: ModelConfig,
    notes: list[str],
) -> tuple[list[Trace], list[Workload | WorkloadStream] | None]:
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
        sizes = sorted({t.meta.model_params_b for t in traces if t.meta.model_params_b})
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
