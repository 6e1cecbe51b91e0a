"""The live executor's per-candidate predictions: closed forms of the scaled estimate, the order of
preference of resize-cost sources, and the twin's calibrated cost models when `--costs` is given."""

from __future__ import annotations

import pytest
import yaml

from dynaresize.config import load_run_config
from dynaresize.executor.batch import RolloutBatch, RolloutSample
from dynaresize.executor.config import LIVE_PIPELINE_MODES, LiveConfig, PipelineMode
from dynaresize.executor.observe.estimates import CandidateEstimator
from dynaresize.executor.rl.model_spec import ModelDtype
from dynaresize.policies.types import Allocation, CostSource, StageTimes
from dynaresize.traces.phases import PhaseName, StrategyName

SPLITS = tuple(Allocation.parse(x) for x in ("3:1", "2:2", "1:3"))


def estimator(pipeline=PipelineMode.ONE_STEP_OFF, **kw) -> CandidateEstimator:
    return CandidateEstimator(
        candidates=SPLITS,
        pipeline=pipeline,
        strategy=StrategyName.OVERLAPPED,
        num_params=10_000,
        weight_bytes_per_param=4,
        costs_path=kw.pop("costs_path", None),
        **kw,
    )


def times(step: int, split: str, rollout_s: float, train_s: float, sync_s: float) -> StageTimes:
    return StageTimes(
        step=step,
        allocation=Allocation.parse(split),
        rollout_s=rollout_s,
        train_s=train_s,
        sync_s=sync_s,
        step_s=max(rollout_s, train_s) + sync_s,
    )


@pytest.mark.parametrize("pipeline", LIVE_PIPELINE_MODES)
def test_stage_times_scale_with_the_gpus_of_each_role(pipeline) -> None:
    recent = (times(0, "2:2", 4.0, 2.0, 0.5), times(1, "2:2", 6.0, 4.0, 0.5))
    got = {
        c.allocation.label: c
        for c in estimator(pipeline).predict(current=SPLITS[1], recent=recent, measured_resize_s=())
    }
    # rollout work 2 GPUs x 5 s = 10 GPU-s, train work 2 x 3 s = 6 GPU-s
    for label, rollout_s, train_s in (("3:1", 10.0, 2.0), ("2:2", 5.0, 3.0), ("1:3", 10 / 3, 6.0)):
        if pipeline is PipelineMode.ONE_STEP_OFF:
            want = max(rollout_s, train_s) + 0.5
        else:
            want = rollout_s + train_s + 0.5
        assert got[label].predicted_step_s == pytest.approx(want)
    assert got["2:2"].predicted_resize_critical_s == 0.0


def test_measured_resizes_take_precedence_over_the_model() -> None:
    recent = (times(0, "2:2", 4.0, 2.0, 0.5),)
    est = estimator()
    modelled = est.predict(current=SPLITS[1], recent=recent, measured_resize_s=())
    assert {c.cost_source for c in modelled} == {CostSource.MODEL}
    assert modelled[0].predicted_resize_critical_s > 0
    measured = est.predict(current=SPLITS[1], recent=recent, measured_resize_s=(1.0, 3.0))
    assert {c.cost_source for c in measured} == {CostSource.MEASURED}
    assert measured[0].predicted_resize_critical_s == pytest.approx(2.0)


def test_with_costs_the_twin_cost_models_predict_from_the_last_batch(tmp_path) -> None:
    from dynaresize.traces.workload import Workload
    from dynaresize.twin.step_costs import stage_time_components

    scenario = load_run_config("live_cpu")
    costs = tmp_path / "costs.yaml"
    costs.write_text(yaml.safe_dump({"train": {"s_per_token_one_gpu": 0.01}}))
    est = estimator(costs_path=costs, scenario=scenario)
    samples = [
        RolloutSample(0, p, i, (1, 2, 3), tuple(range(5 + 7 * p)), 0.0, False, 0.0, 2, 0)
        for p in range(4)
        for i in range(4)
    ]
    batch = RolloutBatch(batch_id=0, weights_version=0, samples=samples, rollout_s=1.0)
    got = est.predict(
        current=SPLITS[1],
        recent=(times(0, "2:2", 1, 1, 0.1),),
        measured_resize_s=(),
        last_batch=batch,
    )
    workload = Workload.from_steps([batch.prompt_lengths()], [batch.response_lengths()])
    rollout, train, sync = stage_time_components(
        workload,
        candidates=SPLITS,
        cluster=scenario.cluster,
        model=scenario.model,
        costs=est.costs,
    )
    for c, cand in enumerate(got):
        want = max(rollout[0, c], train[0, c]) + sync[c]
        assert cand.predicted_step_s == pytest.approx(want)
        assert cand.cost_source is CostSource.CALIBRATED
    assert train[0, 0] < train[0, 2]  # three trainers are faster than one


def test_the_model_costs_each_move_by_its_direction() -> None:
    """Without measured resizes each candidate gets the twin's plan of its own move: from 2:2,
    the move that adds a rollout replica pays the engine start, the one towards training not."""
    from dynaresize.twin.costs import CostModels

    recent = (times(0, "2:2", 4.0, 2.0, 0.5),)
    got = {
        c.allocation.label: c
        for c in estimator().predict(current=SPLITS[1], recent=recent, measured_resize_s=())
    }
    engine_start_s = CostModels().resize.overlapped[PhaseName.ROLLOUT_REINIT].base_s
    gap = got["1:3"].predicted_resize_critical_s - got["3:1"].predicted_resize_critical_s
    assert gap == pytest.approx(engine_start_s)


@pytest.mark.parametrize("dtype", list(ModelDtype))
def test_bytes_per_parameter_follow_the_models_dtype(dtype) -> None:
    """The resize cost model reads the weights' bytes per parameter from the model's dtype
    (a float64 model used to count as 2 bytes, like bfloat16)."""
    torch = pytest.importorskip("torch")
    from dynaresize.executor.rl.model import TORCH_DTYPES

    live = LiveConfig.model_validate({"model": {"preset": "tiny", "dtype": dtype.value}})
    got = CandidateEstimator.for_run(
        live, num_params=10_000, strategy=StrategyName.OVERLAPPED, costs_path=None
    )
    assert got.weight_bytes_per_param == torch.empty((), dtype=TORCH_DTYPES[dtype]).element_size()


def test_a_float64_model_costs_more_to_resize_than_a_float32_one() -> None:
    def critical_s(dtype: str) -> float:
        live = LiveConfig.model_validate({"model": {"dtype": dtype}})
        estimator = CandidateEstimator.for_run(
            live, num_params=10**9, strategy=StrategyName.OVERLAPPED, costs_path=None
        )
        return estimator.model_critical_s

    assert critical_s("float64") > critical_s("float32") > critical_s("bfloat16")
