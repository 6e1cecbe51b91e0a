"""One resize phase's fit: `base_s` and the per-GB rate from (GB moved, seconds) pairs.

A bounded linear least-squares fit recovers both where the records moved at least two sizes (and
number three or more); otherwise the rate is held at its configured value, or lowered to the
measured seconds per GB where the configured rate alone would exceed what was measured, and only
`base_s` is fitted. Each parameter's status says which.

A phase that moves no state has no per-GB rate; where its records span moves of at least two
numbers of GPUs changing role (three records or more), the same line fit is made against that
number instead (`s_per_moved_gpu`): engines woken one after another on a shared GPU take longer
the more of them a move wakes, while devices of their own do their parts at once and the fitted
slope comes out near zero. A phase that moves bytes keeps its configured per-GPU rate: on the
moves between three splits the GPUs changing role and the re-cut share of the state rise
together, so the records could not tell the two rates apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from dynaresize.traces.phases import PhaseName, StrategyName

from ..costs.resize import PhaseCostParams, StateMoved
from .fit_quality import FitQuality, fit_nonnegative_line, standard_errors

MIN_RECORDS_FOR_RATE = 3
"""Records a phase needs (over at least two sizes) before its per-GB rate is fitted."""


class ParamStatus(str, Enum):
    FITTED = "fitted"
    HELD = "held"
    """Not determined by the records: kept at the configured value."""
    LOWERED = "lowered"
    """Not determined, and the configured value alone exceeded the records: lowered to them."""
    NOT_APPLICABLE = "n/a"
    """The phase moves nothing, so it has no per-GB rate."""


@dataclass(frozen=True, kw_only=True)
class PhaseFit(FitQuality):
    """The fit of one phase of one strategy: one point per record."""

    strategy: StrategyName
    phase: PhaseName
    gb: np.ndarray
    """Gigabytes each record moved."""
    base_s: float
    s_per_gb_measured: float
    """Seconds per GB on the traces' own links (the fitted slope)."""
    s_per_gb_param: float
    """The same rate at the reference bandwidth, as the twin's parameter stores it."""
    base_status: ParamStatus
    rate_status: ParamStatus
    base_stderr_s: float | None
    rate_stderr_s_per_gb: float | None
    reasons: list[str] = field(default_factory=list)
    held_because: str | None = None
    """Why the per-GB rate could not be determined, when it was held."""
    moved_gpus: np.ndarray | None = None
    """GPUs changing role in each record's move, where the records name their moves."""
    s_per_moved_gpu: float = 0.0
    """Seconds per GPU changing role (see the module docstring)."""
    moved_status: ParamStatus = ParamStatus.NOT_APPLICABLE
    moved_stderr_s: float | None = None

    @property
    def num_records(self) -> int:
        return self.num_points

    @property
    def r2(self) -> float | None:
        """Coefficient of determination of the two-parameter fit (`FitQuality.r2`); None also
        when only base_s was fitted (a constant explains none of the variance by construction)."""
        if ParamStatus.FITTED not in (self.rate_status, self.moved_status):
            return None
        return super().r2

    def describe(self) -> str:
        r2 = "n/a (base only)" if self.r2 is None else f"{self.r2:.3f}"
        base = _with_error(self.base_s, self.base_stderr_s, "s")
        rate = _with_error(self.s_per_gb_measured, self.rate_stderr_s_per_gb, "s/GB")
        sizes = ", ".join(f"{g:.3g}" for g in np.unique(np.round(self.gb, 3)))
        per_gpu = ""
        if self.moved_status is ParamStatus.FITTED or self.s_per_moved_gpu > 0:
            value = _with_error(self.s_per_moved_gpu, self.moved_stderr_s, "s")
            counts = ", ".join(str(int(n)) for n in np.unique(self.moved_gpus_or_none()))
            per_gpu = (
                f", s_per_moved_gpu {value} ({self.moved_status.value}; moves of {counts} GPUs)"
            )
        return (
            f"resize {self.strategy.value}.{self.phase.value}: "
            f"base_s {base} ({self.base_status.value}), "
            f"s_per_gb {rate} ({self.rate_status.value}){per_gpu}; R²={r2}, "
            f"RMSE {self.rmse_s:.3g} s, max |residual| {self.max_abs_residual_s:.3g} s over "
            f"{self.num_records} records at {sizes} GB"
        )

    def moved_gpus_or_none(self) -> np.ndarray:
        """The records' GPUs changing role, empty where they were not given."""
        return np.array([], dtype=int) if self.moved_gpus is None else self.moved_gpus


def _with_error(value: float, stderr: float | None, unit: str) -> str:
    return f"{value:.4g} {unit}" if stderr is None else f"{value:.4g} ± {stderr:.2g} {unit}"


def fit_one_phase(
    strategy: StrategyName,
    phase: PhaseName,
    gb: np.ndarray,
    measured_s: np.ndarray,
    prior: PhaseCostParams,
    scale: float,
    moved_gpus: np.ndarray | None = None,
) -> PhaseFit:
    """base_s and the per-GB slope by bounded least squares, or base_s alone when the slope is
    not determined (held at the prior, converted to this cluster's links). `moved_gpus` (GPUs
    changing role in each record's move) lets a phase that moves nothing fit its per-GPU rate."""
    sizes = np.unique(np.round(gb, 6))
    reasons: list[str] = []
    why: str | None = None
    moves_nothing = prior.moves is StateMoved.NONE and not gb.any()
    if moves_nothing and moved_gpus is not None:
        per_gpu = _fit_per_moved_gpu(strategy, phase, moved_gpus, measured_s, prior)
        if per_gpu is not None:
            return per_gpu
    # A configured per-GPU rate the records do not determine is kept, and taken off each
    # record before the rest is fitted.
    held_per_gpu_s = (
        prior.s_per_moved_gpu * moved_gpus if moved_gpus is not None else np.zeros(len(gb))
    )
    fitted_s = measured_s - held_per_gpu_s
    if moves_nothing:
        rate_status = ParamStatus.NOT_APPLICABLE
    elif len(sizes) >= 2 and len(gb) >= MIN_RECORDS_FOR_RATE:
        rate_status = ParamStatus.FITTED
    else:
        rate_status = ParamStatus.HELD
        why = (
            f"every record moved the same {sizes[0]:.3g} GB"
            if len(sizes) < 2
            else f"only {len(gb)} records (need {MIN_RECORDS_FOR_RATE})"
        )
        reasons.append(
            f"s_per_gb cannot be determined ({why}): held at the configured "
            f"{prior.s_per_gb * scale:.4g} s/GB on these links"
        )
    if rate_status is ParamStatus.FITTED:
        line = fit_nonnegative_line(gb, fitted_s)
        base_s, slope = line.intercept, line.slope
        stderrs = [line.intercept_stderr, line.slope_stderr]
    else:
        slope = 0.0 if moves_nothing else prior.s_per_gb * scale
        lowered = not moves_nothing and gb.sum() > 0
        lowered = lowered and float(np.mean(fitted_s - slope * gb)) < 0
        if lowered:
            # The configured rate alone would exceed what was measured: the records bound the
            # rate from above, so it is lowered to the measured seconds per GB (base_s 0).
            slope = float(fitted_s.sum() / gb.sum())
            rate_status = ParamStatus.LOWERED
            reasons[-1] = (
                f"s_per_gb cannot be determined ({why}), and the configured "
                f"{prior.s_per_gb * scale:.4g} s/GB alone would exceed the measured times: "
                f"lowered to the measured {slope:.4g} s/GB on these links (an upper bound; "
                "base_s 0)"
            )
        base_s = 0.0 if lowered else max(0.0, float(np.mean(fitted_s - slope * gb)))
        stderrs = standard_errors(np.ones((len(gb), 1)), fitted_s - (base_s + slope * gb))
    predicted = base_s + slope * gb + held_per_gpu_s
    return PhaseFit(
        strategy=strategy,
        phase=phase,
        gb=gb,
        measured_s=measured_s,
        predicted_s=predicted,
        base_s=base_s,
        s_per_gb_measured=slope,
        s_per_gb_param=slope / scale if not moves_nothing else prior.s_per_gb,
        base_status=ParamStatus.FITTED,
        rate_status=rate_status,
        base_stderr_s=stderrs[0],
        rate_stderr_s_per_gb=stderrs[1] if rate_status is ParamStatus.FITTED else None,
        reasons=reasons,
        held_because=why,
        moved_gpus=moved_gpus,
        s_per_moved_gpu=prior.s_per_moved_gpu,
        moved_status=ParamStatus.HELD if prior.s_per_moved_gpu > 0 else ParamStatus.NOT_APPLICABLE,
    )


def _fit_per_moved_gpu(
    strategy: StrategyName,
    phase: PhaseName,
    moved_gpus: np.ndarray,
    measured_s: np.ndarray,
    prior: PhaseCostParams,
) -> PhaseFit | None:
    """base_s and s_per_moved_gpu of a phase that moves nothing, by the bounded line fit, where
    the records span two numbers of GPUs changing role or more (and number at least
    MIN_RECORDS_FOR_RATE); None where they do not, and the phase is fitted as before."""
    counts = np.unique(moved_gpus)
    if len(counts) < 2 or len(moved_gpus) < MIN_RECORDS_FOR_RATE:
        return None
    line = fit_nonnegative_line(moved_gpus.astype(np.float64), measured_s)
    predicted = line.predict(moved_gpus.astype(np.float64))
    return PhaseFit(
        strategy=strategy,
        phase=phase,
        gb=np.zeros(len(measured_s)),
        measured_s=measured_s,
        predicted_s=predicted,
        base_s=line.intercept,
        s_per_gb_measured=0.0,
        s_per_gb_param=prior.s_per_gb,
        base_status=ParamStatus.FITTED,
        rate_status=ParamStatus.NOT_APPLICABLE,
        base_stderr_s=line.intercept_stderr,
        rate_stderr_s_per_gb=None,
        moved_gpus=moved_gpus,
        s_per_moved_gpu=line.slope,
        moved_status=ParamStatus.FITTED,
        moved_stderr_s=line.slope_stderr,
    )
