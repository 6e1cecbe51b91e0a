"""The first resize's cost prior comes from the run's own setup timings, not the twin's default
model (94.9 s for a tiny CPU run that then measured 0.04 s); the run folder says how far it was
from the first measurement. No Ray: well under a second."""

from __future__ import annotations

import json

import pytest

from dynaresize.executor.observe.setup_prior import PRIOR_FILE, prior_from_setup, write_prior_check
from dynaresize.traces.phases import StrategyName

# setup.json of a 4-worker tiny CPU run (seconds)
SETUP = {
    "actors_started": 6.1,
    "world_group": 0.4,
    "models_built": 0.3,
    "roles_taken": 0.05,
    "first_weight_sync": 0.01,
}


def _parts(name: StrategyName):
    from dynaresize.executor.strategies.catalog import STRATEGIES

    return STRATEGIES[name].setup_parts


def test_the_prior_is_the_setup_work_a_resize_repeats() -> None:
    overlapped = prior_from_setup(_parts(StrategyName.OVERLAPPED), SETUP)
    assert overlapped is not None and overlapped.critical_s == pytest.approx(0.06)
    host_sync = prior_from_setup(_parts(StrategyName.HOST_SYNC), SETUP)
    assert host_sync is not None and host_sync.critical_s == pytest.approx(0.06)
    rebuild = prior_from_setup(_parts(StrategyName.STOP_AND_REBUILD), SETUP)
    assert rebuild is not None and rebuild.critical_s == pytest.approx(6.86)
    assert prior_from_setup(_parts(StrategyName.OVERLAPPED), {"roles_taken": 1.0}) is None
    assert prior_from_setup((), SETUP) is None


def test_the_run_folder_says_how_far_the_prior_was(tmp_path) -> None:
    write_prior_check(tmp_path, prior_s=0.06, source="setup", first_measured_s=0.04)
    check = json.loads((tmp_path / PRIOR_FILE).read_text())
    assert check["prior_over_measured"] == pytest.approx(1.5)
    assert check["prior_source"] == "setup"


def test_the_decision_after_the_first_resize_says_how_far_the_prior_was() -> None:
    from dynaresize.executor.observe.setup_prior import prior_over_measured
    from dynaresize.executor.step_records import decision_record
    from dynaresize.policies.types import Allocation, Decision, StageTimes, StepObservation
    from dynaresize.traces.schema import DecisionRecord

    split = Allocation(train_gpus=1, rollout_gpus=1)
    times = StageTimes(step=3, allocation=split, rollout_s=0.2, train_s=0.3, sync_s=0.0, step_s=0.5)
    obs = StepObservation(step=3, now_s=1.0, allocation=split, recent=(times,), candidates=())
    ratio = prior_over_measured(0.06, 0.04)
    record = decision_record(
        obs,
        Decision.hold("steady"),
        policy="static",
        cost_source="measured",
        resize_id=None,
        prior_over_measured=ratio,
    )
    assert record.prior_over_measured == pytest.approx(1.5)
    assert prior_over_measured(0.06, 0.0) is None
    # a record written before the field existed still reads, without it
    old = record.model_dump(exclude={"prior_over_measured"})
    assert DecisionRecord.model_validate(old).prior_over_measured is None
