"""The fit scaffold every calibration shares: one R²/RMSE rule and one bounded line fit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaresize.traces.phases import PhaseName, StrategyName
from dynaresize.twin.calibration import StageFit
from dynaresize.twin.calibration.fit_quality import FitQuality, fit_nonnegative_line
from dynaresize.twin.calibration.phase_fit import ParamStatus, PhaseFit


def test_r2_rmse_and_residuals_follow_their_definitions():
    measured = np.array([1.0, 2.0, 4.0, 7.0])
    predicted = np.array([1.5, 2.0, 3.5, 7.5])
    quality = FitQuality(measured_s=measured, predicted_s=predicted)
    residuals = measured - predicted
    total = np.sum((measured - measured.mean()) ** 2)
    assert quality.r2 == pytest.approx(1 - np.sum(residuals**2) / total)
    assert quality.rmse_s == pytest.approx(np.sqrt(np.mean(residuals**2)))
    assert quality.max_abs_residual_s == pytest.approx(0.5)
    assert quality.num_points == 4 and quality.mean_s == pytest.approx(3.5)


@pytest.mark.parametrize(
    "measured",
    [np.array([3.0]), np.full(5, 2.5), 1e4 + np.array([0.0, 1e-9, -1e-9, 2e-9])],
    ids=["one point", "constant", "constant up to rounding"],
)
def test_r2_is_undefined_for_one_point_or_measurements_that_do_not_vary(measured):
    predicted = measured + 0.1
    assert FitQuality(measured_s=measured, predicted_s=predicted).r2 is None


def test_stage_and_phase_fits_use_the_same_rule():
    measured = 1e4 + np.array([0.0, 1e-9, -1e-9, 2e-9])
    predicted = np.full(4, 1e4)
    stage = StageFit(stage="train", params={}, measured_s=measured, predicted_s=predicted)
    phase = PhaseFit(
        strategy=StrategyName.OVERLAPPED,
        phase=PhaseName.STATE_EXPORT,
        gb=np.array([1.0, 2.0, 3.0, 4.0]),
        measured_s=measured,
        predicted_s=predicted,
        base_s=1e4,
        s_per_gb_measured=0.0,
        s_per_gb_param=0.0,
        base_status=ParamStatus.FITTED,
        rate_status=ParamStatus.FITTED,
        base_stderr_s=None,
        rate_stderr_s_per_gb=None,
    )
    assert stage.r2 is None and phase.r2 is None
    varied = np.array([1.0, 2.0, 3.0, 5.0])
    stage = StageFit(stage="train", params={}, measured_s=varied, predicted_s=varied * 0.9)
    assert stage.r2 == FitQuality(measured_s=varied, predicted_s=varied * 0.9).r2


@settings(max_examples=60, deadline=None)
@given(
    intercept=st.floats(0.0, 100.0),
    slope=st.floats(0.0, 10.0),
    noise_seed=st.integers(0, 2**16),
)
def test_line_fit_matches_ordinary_least_squares_inside_the_bounds(intercept, slope, noise_seed):
    """Where the unconstrained solution is non-negative the bounded fit is the OLS fit, and the
    standard errors are the textbook ones."""
    rng = np.random.default_rng(noise_seed)
    x = np.linspace(1.0, 20.0, 12)
    y = intercept + slope * x + rng.normal(0.0, 0.5, len(x))
    design = np.column_stack([np.ones_like(x), x])
    ols, *_ = np.linalg.lstsq(design, y, rcond=None)
    if np.any(ols < 0):
        return
    line = fit_nonnegative_line(x, y)
    assert [line.intercept, line.slope] == pytest.approx(ols, rel=1e-6, abs=1e-6)
    residuals = y - design @ ols
    sigma2 = residuals @ residuals / (len(x) - 2)
    slope_se = np.sqrt(sigma2 / np.sum((x - x.mean()) ** 2))
    assert line.slope_stderr == pytest.approx(slope_se, rel=1e-4)
    np.testing.assert_allclose(line.predict(x), line.intercept + line.slope * x)


def test_line_fit_clamps_a_falling_trend_to_a_flat_line():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    y = np.array([8.0, 6.0, 5.0, 1.0])
    line = fit_nonnegative_line(x, y)
    assert line.slope == pytest.approx(0.0, abs=1e-9)
    assert line.intercept == pytest.approx(y.mean())


def test_line_fit_has_no_standard_errors_without_a_spare_point():
    line = fit_nonnegative_line(np.array([1.0, 2.0]), np.array([3.0, 5.0]))
    assert line.slope == pytest.approx(2.0) and line.intercept == pytest.approx(1.0)
    assert line.intercept_stderr is None and line.slope_stderr is None
