"""What `dynaresize calibrate` fits, as one call: stage costs, and resize phases where the
traces recorded resizes, on the model and links of an analysis context.

The command line, the notebooks and the benchmarks call this rather than wiring the stage fitters
and the resize fitter together themselves.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..traces.io import Trace
from .analysis_context import AnalysisContext
from .fit import CostFit, FitError, fit_costs
from .fit_resize import ResizeFit, ResizeStageFitter, has_resize_records

__all__ = ["calibrate"]


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
