"""Digests, not version labels, prove which weights generated a sample: the lineage check
compares the weights replicas generated with against the weights the trainers published, and a
replica made to skip its weight load (the worker's documented fault injection) advances its label
but stops the run at that very weight sync, naming the version and the replica

Time: one 3-step live run on 3 CPU workers (about 30 s on 2 cores), shared Ray session."""

from __future__ import annotations

import pytest

from dynaresize.executor.config import LiveConfig
from dynaresize.executor.run_folder.lineage import _check_digests
from dynaresize.executor.run_folder.records import LineageRecord


def _row(step: int, version: int, digest: str | None) -> LineageRecord:
    return LineageRecord(
        step=step,
        rollout_batch_id=step,
        prompt_id=step,
        sample_index=0,
        generated_weights_version=version,
        generated_by_device=2,
        consumed_by_device=0,
        trainer_weights_version=step,
        response_tokens=3,
    ).model_copy(update={"generated_weights_digest": digest})


def test_digests_not_labels_decide() -> None:
    published = {0: {"aa"}, 1: {"bb"}}
    assert _check_digests([_row(0, 0, "aa"), _row(1, 1, "bb")], published) == []
    # the label says version 1 but the weights are version 0's
    (problem,) = _check_digests([_row(0, 0, "aa"), _row(1, 1, "aa")], published)
    assert "step 1: worker 2 generated with weights digest aa" in problem and "bb" in problem
    assert _check_digests([_row(0, 0, None)], published)  # a missing digest is not proof
    assert _check_digests([_row(0, 0, "aa")], None) == []  # records from before digests
    assert _check_digests([], {0: {"aa", "cc"}})  # one version, two different weights


@pytest.mark.live
@pytest.mark.timeout(600)
def test_a_replica_that_skips_its_weight_load_stops_the_run(ray_session, tmp_path) -> None:
    from dynaresize.executor.testing.harness import live_session
    from dynaresize.executor.worker.actor import LiveWorker
    from dynaresize.executor.worker.engine import WeightsMismatchError

    config = LiveConfig.model_validate(
        {
            "num_workers": 3,
            "initial_allocation": "2:1",
            "candidate_allocations": ["2:1"],
            "num_steps": 3,
            "prompts_per_step": 2,
            "samples_per_prompt": 2,
            "max_response_tokens": 8,
            "pipeline": "sync",
            "optimizer": {"lr": 1e-2},
            "checkpoint_every_steps": None,
        }
    )
    # An honest run passes the same check with digests: test_live_run checks its resized run.
    out = tmp_path / "stale"
    out.mkdir()

    def inject(rt) -> None:
        rt.call(rt.all_ids, LiveWorker.inject_fault, "stale_weights").wait("fault")

    with (
        live_session(config, out, before_setup=inject) as session,
        pytest.raises(WeightsMismatchError) as stopped,
    ):
        session.run()
    # the first sync after step 0 (version 1) finds the replica still on the initial weights
    assert "weights version 1: the first trainer sent digest" in str(stopped.value)
    assert "replicas loaded {2: " in str(stopped.value)
