"""Calibration: the twin's cost parameters fitted to measured traces, and the fitted twin checked
against a recorded run.

- `fit_quality` is what every fit shares: R², RMSE and residuals by one rule, and the bounded
  line fit with standard errors;
- `fit` fits the stage costs to the steps of one or more traces, one fitter per stage
  (`fit_rollout`, `fit_train`, `fit_sync`) on what they share (`stage_fit`);
- `fit_resize` fits the resize phases of each strategy to the resize records, one phase at a
  time (`phase_fit`), after reading what the records say about each phase's bytes, direction
  and place in the DAG (`resize_readings`);
- `trace_costs.calibrate` does both, as `dynaresize calibrate` does, and `trace_model_inputs`
  gives replay and break-even a trace's workload with costs fitted to it;
- `resize_measure` reads a resize's critical path off the records, for the fits and for
  validation alike;
- `validate` replays a recorded run in the twin from its workload and decisions only, with
  fitted costs, and `validation_report` says how far the prediction is from what was measured
  (figures, lines, a plot and files).

What it may import: the twin's core (`dynaresize.twin` but its other subpackages),
`dynaresize.policies`, `dynaresize.traces` and `dynaresize.config_io`; SciPy for the fits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .fit import CostFit, fit_costs, fitted_overrides
    from .fit_resize import ResizeFit, fit_resize_phases
    from .stage_fit import FitError, StageFit
    from .trace_costs import TraceModelInputs, calibrate, calibrated_file, trace_model_inputs
    from .validate import run_validation, validate_trace
    from .validation_report import ValidationReport, plot_validation

__all__ = [
    "CostFit",
    "FitError",
    "ResizeFit",
    "StageFit",
    "TraceModelInputs",
    "ValidationReport",
    "calibrate",
    "calibrated_file",
    "fit_costs",
    "fit_resize_phases",
    "fitted_overrides",
    "plot_validation",
    "run_validation",
    "trace_model_inputs",
    "validate_trace",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CostFit": "fit",
        "FitError": "stage_fit",
        "StageFit": "stage_fit",
        "fit_costs": "fit",
        "fitted_overrides": "fit",
        "ResizeFit": "fit_resize",
        "fit_resize_phases": "fit_resize",
        "TraceModelInputs": "trace_costs",
        "calibrate": "trace_costs",
        "calibrated_file": "trace_costs",
        "trace_model_inputs": "trace_costs",
        "ValidationReport": "validation_report",
        "plot_validation": "validation_report",
        "run_validation": "validate",
        "validate_trace": "validate",
    },
)
