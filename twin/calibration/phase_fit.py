"""One resize phase's fit: `base_s` and the per-GB rate from (GB moved, seconds) pairs.

A bounded linear least-squares fit recovers both where the records moved at least two sizes (and
number three or more); otherwise the rate is held at its configured value, or lowered to the
measured seconds per GB where the configured rate alone would exceed what was measured, and only
`base_s` is fitted. Each parameter's status says which.
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

    @property
    def num_records(self) -> int:
        return self.num_points

    @property
    def r2(self) -> float | None:
        """Coefficient of determination of the two-parameter fit (`FitQuality.r2`); None also
        when only base_s was fitted (a constant explains none of the variance by construction)."""
        if self.rate_status is not ParamStatus.FITTED:
            return None
        return super().r2

    def describe(self) -> str:
        r2 = "n/a (base only)" if self.r2 is None else f"{self.r2:.3f}"
        base = _with_error(self.base_s, self.base_stderr_s, "s")
        rate = _with_error(self.s_per_gb_measured, self.rate_stderr_s_per_gb, "s/GB")
        sizes = ", ".join(f"{g:.3g}" for g in np.unique(np.round(self.gb, 3)))
        return (
            f"resize {self.strategy.value}.{self.phase.value}: "
            f"base_s {base} ({self.base_status.value}), "
            f"s_per_gb {rate} ({self.rate_status.value}); R²={r2}, RMSE {self.rmse_s:.3g} s, "
            f"max |residual| {self.max_abs_residual_s:.3g} s over {self.num_records} "
            f"records at {sizes} GB"
        )


def _with_error(value: float, stderr: float | None, unit: str) -> str:
    return f"{value:.4g} {unit}" if stderr is None else f"{value:.4g} ± {stderr:.2g} {unit}"


def fit_one_phase(
    strategy: StrategyName,
    phase: PhaseName,
    gb: np.ndarray,
    measured_s: np.ndarray,
    prior: PhaseCostParams,
    scale: float,
) -> PhaseFit:
    """base_s and the per-GB slope by bounded least squares, or base_s alone when the slope is
    not determined (held at the prior, converted to this cluster's links)."""
    sizes = np.unique(np.round(gb, 6))
    reasons: list[str] = []
    why: str | None = None
    moves_nothing = prior.moves is StateMoved.NONE and not gb.any()
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
        line = fit_nonnegative_line(gb, measured_s)
        base_s, slope = line.intercept, line.slope
        stderrs = [line.intercept_stderr, line.slope_stderr]
    else:
        slope = 0.0 if moves_nothing else prior.s_per_gb * scale
        lowered = not moves_nothing and gb.sum() > 0
        lowered = lowered and float(np.mean(measured_s - slope * gb)) < 0
        if lowered:
            # The configured rate alone would exceed what was measured: the records bound the
            # rate from above, so it is lowered to the measured seconds per GB (base_s 0).
            slope = float(measured_s.sum() / gb.sum())
            rate_status = ParamStatus.LOWERED
            reasons[-1] = (
                f"s_per_gb cannot be determined ({why}), and the configured "
                f"{prior.s_per_gb * scale:.4g} s/GB alone would exceed the measured times: "
                f"lowered to the measured {slope:.4g} s/GB on these links (an upper bound; "
                "base_s 0)"
            )
        base_s = 0.0 if lowered else max(0.0, float(np.mean(measured_s - slope * gb)))
        stderrs = standard_errors(np.ones((len(gb), 1)), measured_s - (base_s + slope * gb))
    predicted = base_s + slope * gb
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
    )
