"""The costs traces are modelled with, as one call each.

- `calibrate`: what `dynaresize calibrate` fits, stage costs and, where the traces recorded
  resizes, resize phases, on the model and links of an analysis context. The command line, the
  notebooks and the benchmarks call this rather than wiring the stage fitters and the resize
  fitter together themselves.
- `trace_model_inputs`: what replay and break-even model one trace with, its workload and costs
  fitted to it (or the context's, when the user gave them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dynaresize.traces.io import Trace
from dynaresize.traces.workload import Workload
from dynaresize.traces.workload_stream import WorkloadStream

from ..analysis_context import AnalysisContext
from ..costs import CostModels
from ..costs.provenance import CALIBRATE, FittedOn, stamped
from ..trace_source import trace_workload, trace_workload_source
from .fit import CostFit, FitError, fit_costs, fitted_overrides
from .fit_resize import ResizeFit, ResizeStageFitter, has_resize_records

__all__ = ["TraceModelInputs", "calibrate", "calibrated_file", "trace_model_inputs"]


def calibrate(
    traces: Sequence[Trace], context: AnalysisContext, *, require_resize_fit: bool = False
) -> tuple[CostFit, ResizeFit | None]:
    """The fitted costs and, when the traces have resize records, the resize-phase fit.

    `require_resize_fit` turns traces without resize records, or resize parameters they cannot
    determine, into a FitError.
    """
    resize_fitter = None
    if has_resize_records(traces):
        resize_fitter = ResizeStageFitter(
            traces,
            host_bandwidth_gbps=context.scenario.cluster.host_bandwidth_gbps,
            interconnect_bandwidth_gbps=context.sync_bandwidth_gbps,
            require_determined=require_resize_fit,
        )
    elif require_resize_fit:
        raise FitError("no resize records in the traces: resize phases cannot be fitted")
    fit = fit_costs(
        traces,
        base=context.costs,
        model=context.model,
        rollout_tp_size=context.rollout_tp_size,
        sync_bandwidth_gbps=context.sync_bandwidth_gbps,
        extra_fitters=[resize_fitter] if resize_fitter else [],
    )
    return fit, resize_fitter.result if resize_fitter is not None else None


def calibrated_file(
    fit: CostFit, traces: Sequence[Trace], context: AnalysisContext, *, sources: Sequence[str]
) -> dict:
    """What `dynaresize calibrate` writes: the fitted sections, stamped with the model sizes and
    hardware they were fitted on and a digest of each section (`costs.provenance`)."""
    sizes = [t.meta.model_params_b or context.model.num_params_b for t in traces]
    cluster = context.scenario.cluster
    fitted_on = FittedOn(
        written_by=CALIBRATE,
        model_params_b_min=min(sizes),
        model_params_b_max=max(sizes),
        hardware=f"{cluster.total_gpus} GPUs of {cluster.gpu_memory_gb:g} GB, weight-sync link "
        f"{context.sync_bandwidth_gbps:g} GB/s, host staging {cluster.host_bandwidth_gbps:g} GB/s",
        traces=list(sources),
    )
    return stamped(fitted_overrides(fit), fitted_on)


@dataclass(frozen=True)
class TraceModelInputs:
    """What a trace is modelled with: its workload and the costs (fitted to it, or given)."""

    workload: Workload | WorkloadStream
    """Held, or (`trace_model_inputs(..., streamed=True)`) the trace's samples file read a
    block at a time where it is clean and in order."""
    inferred: list[str]
    """What had to be inferred to build the workload from the trace."""
    costs: CostModels
    fit: CostFit | None
    """The fit the costs came from; None when the context's costs were used as given."""


def trace_model_inputs(
    trace: Trace, context: AnalysisContext, *, fit_to_trace: bool, streamed: bool = False
) -> TraceModelInputs:
    """The trace's workload, and the context's costs fitted to the trace unless `fit_to_trace`
    is False (costs given by the user). The fit reuses the workload so it is built once.
    `streamed` leaves a clean samples file on disk (`trace_workload_source`)."""
    workload: Workload | WorkloadStream
    workload, inferred = trace_workload_source(trace) if streamed else trace_workload(trace)
    if not fit_to_trace:
        return TraceModelInputs(workload=workload, inferred=inferred, costs=context.costs, fit=None)
    fit = fit_costs(
        [trace],
        base=context.costs,
        model=context.model,
        rollout_tp_size=context.rollout_tp_size,
        sync_bandwidth_gbps=context.sync_bandwidth_gbps,
        workloads=[workload],
    )
    return TraceModelInputs(workload=workload, inferred=inferred, costs=fit.costs, fit=fit)
