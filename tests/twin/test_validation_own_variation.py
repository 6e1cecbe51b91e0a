"""The run's own variation that a validation reports beside the twin's error: each step
predicted by the median of the other steps measured on its split."""

from __future__ import annotations

import pandas as pd
import pytest

from dynaresize.policies.types import CostSource
from dynaresize.traces.phases import PipelineMode, StrategyName
from dynaresize.twin.calibration.validation_report import ValidationReport


def report(splits: list[str], step_s: list[float]) -> ValidationReport:
    per_step = pd.DataFrame(
        {
            "step": range(len(splits)),
            "allocation": splits,
            "measured_step_s": step_s,
            "predicted_step_s": step_s,
            "step_ape": [0.0] * len(splits),
            **{f"{kind}_{s}_s": step_s for kind in ("measured", "predicted") for s in ("rollout",)},
            **{
                f"{k}_{s}_s": [1.0] * len(splits)
                for k in ("measured", "predicted")
                for s in ("train", "sync")
            },
        }
    )
    return ValidationReport(
        per_step=per_step,
        resizes=pd.DataFrame(),
        measured_total_s=sum(step_s),
        predicted_total_s=sum(step_s),
        unmodelled_gap_s=0.0,
        strategy=StrategyName.OVERLAPPED,
        pipeline_mode=PipelineMode.SYNC,
        cost_source=CostSource.CALIBRATED,
    )


def test_each_step_is_set_against_the_median_of_the_others_on_its_split():
    # 2:2 steps 10, 12, 14: the others' medians 13, 12, 11 -> errors 0.3, 0, 3/14
    # 1:3 steps 4, 5: each other's -> errors 0.25, 0.2; a lone 3:1 step is left out
    got = report(["2:2", "2:2", "2:2", "1:3", "1:3", "3:1"], [10, 12, 14, 4, 5, 9])
    errors = sorted([0.3, 0.0, 3 / 14, 0.25, 0.2])
    assert got.own_variation_ape() == pytest.approx(errors[2])
    assert got.own_variation_ape("train") == 0.0  # every train time equal
    figures = got.as_dict()
    assert figures["own_variation_step_ape_median"] == pytest.approx(errors[2])
    assert figures["own_variation_stage_ape_median"]["train"] == 0.0
    assert any(line.startswith("the run's own variation") for line in got.summary_lines())


def test_no_split_with_two_steps_has_no_figure():
    got = report(["2:2", "1:3"], [10, 4])
    assert got.own_variation_ape() is None
    assert "no split holds two steps" in "\n".join(got.summary_lines())
