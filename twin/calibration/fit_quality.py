"""What every fit shares: how well fitted predictions explain measurements, and the bounded line
fit that stage and resize-phase calibration both use.

`FitQuality` is the one place R², RMSE and residuals are computed. R² is undefined (None) with
fewer than two points or when the measurements do not vary: the total sum of squares then is
zero up to rounding, relative to the size of the values, and a ratio of rounding noise would
read as a fit quality. `fit_nonnegative_line` fits `y = intercept + slope * x` with both
coefficients at least zero (costs and rates cannot be negative) and gives their ordinary
least-squares standard errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import lsq_linear

__all__ = ["FitQuality", "LineFit", "fit_nonnegative_line", "standard_errors"]

NEAR_CONSTANT_RELATIVE_VARIANCE = 1e-12
"""Measurements whose variance is below this share of their squared mean count as constant."""


@dataclass(frozen=True, kw_only=True)
class FitQuality:
    """Measured values, the fit's predictions of them, and how well the one explains the other."""

    measured_s: np.ndarray
    predicted_s: np.ndarray

    @property
    def residuals_s(self) -> np.ndarray:
        """Measured minus predicted, per fitted point (s)."""
        return self.measured_s - self.predicted_s

    @property
    def num_points(self) -> int:
        return len(self.measured_s)

    @property
    def mean_s(self) -> float:
        return float(self.measured_s.mean()) if self.num_points else 0.0

    @property
    def r2(self) -> float | None:
        """Coefficient of determination; None with fewer than two points or when the
        measurements do not vary."""
        mean = self.mean_s
        total = float(np.sum((self.measured_s - mean) ** 2))
        constant = NEAR_CONSTANT_RELATIVE_VARIANCE * self.num_points * max(mean * mean, 1e-12)
        if self.num_points < 2 or total <= constant:
            return None
        return 1.0 - float(np.sum(self.residuals_s**2)) / total

    @property
    def rmse_s(self) -> float:
        return float(np.sqrt(np.mean(self.residuals_s**2))) if self.num_points else 0.0

    @property
    def max_abs_residual_s(self) -> float:
        return float(np.max(np.abs(self.residuals_s))) if self.num_points else 0.0


@dataclass(frozen=True)
class LineFit:
    """`y = intercept + slope * x`, both at least zero, with their standard errors (None where
    the points leave no degree of freedom)."""

    intercept: float
    slope: float
    intercept_stderr: float | None
    slope_stderr: float | None

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.intercept + self.slope * x


def fit_nonnegative_line(x: np.ndarray, y: np.ndarray) -> LineFit:
    """Bounded linear least squares (scipy's `lsq_linear`) of `y` on `1` and `x`."""
    design = np.column_stack([np.ones_like(x, dtype=np.float64), x])
    solution = lsq_linear(design, y, bounds=(0.0, np.inf))
    intercept, slope = (float(v) for v in solution.x)
    residuals = y - (intercept + slope * x)
    intercept_stderr, slope_stderr = standard_errors(design, residuals)
    return LineFit(intercept, slope, intercept_stderr, slope_stderr)


def standard_errors(design: np.ndarray, residuals: np.ndarray) -> list[float | None]:
    """OLS standard errors of the coefficients of a design with one or two columns, padded to
    two; None where the points leave no degree of freedom or the design is singular."""
    n, p = design.shape
    if n <= p:
        return [None] * 2
    sigma2 = float(residuals @ residuals) / (n - p)
    try:
        cov = sigma2 * np.linalg.inv(design.T @ design)
    except np.linalg.LinAlgError:
        return [None] * 2
    errs: list[float | None] = [float(np.sqrt(max(cov[i, i], 0.0))) for i in range(p)]
    return errs + [None] * (2 - p)
