"""The paper preset reproduces the DynaResize paper's published figures (docs/paper-preset.md).

Fitted: the steady step times on 6:2 and 4:4. From the resize tables: both critical paths.
Predicted: the 100-step total-time reduction of the paper's run, against the paper's own arithmetic.
"""

from __future__ import annotations

import pytest
from bench_scripts import load_script
from twin_scenarios import shipped_scenario

from dynaresize.policies import Allocation
from dynaresize.traces.phases import StrategyName
from dynaresize.twin.simulation import build_context, simulate

PAPER_6_2_STEP_S, PAPER_4_4_STEP_S = 39.84, 23.93
PAPER_OVERLAPPED_S, PAPER_STOP_AND_REBUILD_S = 187.2, 254.8
# 10 steps at 39.84 s, one 187.2 s stall, 90 steps at 23.93 s, against 100 steps at 39.84 s.
PAPER_ARITHMETIC_REDUCTION = 1 - (10 * 39.84 + 187.2 + 90 * 23.93) / (100 * 39.84)


@pytest.fixture(scope="module")
def paper():
    config = shipped_scenario("paper")
    return config, build_context(config)


def _steady(ctx, label: str) -> float:
    """Mean step time of a run that stays on `label`, first and last steps left out."""
    column = ctx.step_costs.index(Allocation.parse(label))
    return float(ctx.step_costs.step_s[1:-1, column].mean())


def test_steady_step_times_are_the_papers_within_two_percent(paper):
    _, ctx = paper
    assert _steady(ctx, "6:2") == pytest.approx(PAPER_6_2_STEP_S, rel=0.02)
    assert _steady(ctx, "4:4") == pytest.approx(PAPER_4_4_STEP_S, rel=0.02)


def test_both_resize_critical_paths_are_the_papers(paper):
    config, ctx = paper
    move = (Allocation.parse("6:2"), Allocation.parse("4:4"))
    assert ctx.plans.between(*move).critical_s == pytest.approx(PAPER_OVERLAPPED_S)
    stop = config.model_copy(
        update={
            "pipeline": config.pipeline.model_copy(
                update={"resize_strategy": StrategyName.STOP_AND_REBUILD}
            )
        }
    )
    rebuild = build_context(stop, workload=ctx.workload)
    assert rebuild.plans.between(*move).critical_s == pytest.approx(PAPER_STOP_AND_REBUILD_S)


def test_hundred_step_reduction_is_within_two_points_of_the_papers_arithmetic(paper):
    config, ctx = paper
    scheduled = next(p for p in config.policies if p.kind == "scheduled")
    summary = simulate(config, scheduled, context=ctx).summary
    assert summary.baseline_allocation == "6:2" and summary.num_resizes == 1
    reduction = 1 - summary.total_s / summary.baseline_total_s
    assert abs(reduction - PAPER_ARITHMETIC_REDUCTION) <= 0.02


def test_the_shipped_parameters_are_what_the_fit_script_finds():
    script = load_script("fit_paper_preset")
    shipped = shipped_scenario("paper").costs
    fitted = script.rounded(script.fit(script.preset_mapping()))
    assert fitted.decode_s_per_active_seq == shipped.rollout.decode_s_per_active_seq
    assert fitted.s_per_token_one_gpu == shipped.train.s_per_token_one_gpu
