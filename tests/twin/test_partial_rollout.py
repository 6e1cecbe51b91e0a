"""Partial rollouts: requests aborted in flight keep their tokens and resume elsewhere.

A batch is followed sample by sample (twin/batch_in_flight.py). Whatever replicas come and go,
no sample is lost or generated twice, each ends with its own length, a resumed request pays the
prefill of its prompt and kept tokens, and a run in which nothing is aborted is the whole-batch
pipeline's run, record for record.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from twin_scenarios import scenario

from dynaresize.twin.batch_in_flight import BatchInFlight, lent_replica_ids, spread_counts
from dynaresize.twin.costs.replica_timeline import plan_replica
from dynaresize.twin.costs.rollout import (
    RolloutCostParams,
    contention_factor,
    replica_chunk_sizes,
    rollout_stage_s,
)
from dynaresize.twin.simulation import build_context, simulate

PARAMS = RolloutCostParams(kv_capacity_tokens_per_replica=None, max_num_seqs_per_replica=6)
ASYNC = [{"mode": "async", "max_staleness_steps": s} for s in (0, 1, 3)]


def _batch(lengths, prompts, replicas, *, keep_tokens=True, params=PARAMS):
    duration = rollout_stage_s(prompts, lengths, num_replicas=len(replicas), params=params)
    return BatchInFlight(
        prompts,
        lengths,
        params=params,
        contention=lambda count: contention_factor(count, params),
        replicas=replicas,
        start_s=0.0,
        duration_s=duration,
        keep_tokens=keep_tokens,
    )


def test_an_undisturbed_batch_is_the_rollout_models_batch():
    rng = np.random.default_rng(0)
    lengths, prompts = rng.integers(1, 300, 50), rng.integers(10, 200, 50)
    batch = _batch(lengths, prompts, [0, 1, 2])
    assert batch.end_s == rollout_stage_s(prompts, lengths, num_replicas=3, params=PARAMS)
    assert batch.segment.end_s == pytest.approx(batch.end_s, rel=1e-12)
    # the rollout model's equal contiguous chunks, in order
    sizes = [len(t.samples) for t in batch.segment.timelines.values()]
    assert sizes == list(replica_chunk_sizes(50, 3))
    assert spread_counts(np.zeros(3, np.int64), 50).tolist() == sizes


replans = st.lists(
    st.tuples(st.floats(0.0, 1.0), st.integers(1, 4), st.booleans()), min_size=1, max_size=5
)


@settings(max_examples=40, deadline=None)
@example(lengths=[1, 53], plan=[(1.0, 1, False)], keep_tokens=True)  # a replica idle at the replan
@given(
    lengths=st.lists(st.integers(0, 120), min_size=1, max_size=40),
    plan=replans,
    keep_tokens=st.booleans(),
)
def test_no_sample_is_lost_or_generated_twice(lengths, plan, keep_tokens):
    """Replicas change at random moments (some leave, lent ones join, all may be rebalanced):
    every sample ends with its own length, once; with partial rollout no token is decoded
    twice, without it only the aborted ones are."""
    lengths = np.array(lengths)
    prompts = np.full(len(lengths), 20)
    batch = _batch(lengths, prompts, [0, 1], keep_tokens=keep_tokens)
    end = batch.end_s
    for fraction, count, rebalance in plan:
        t = fraction * batch.end_s
        replicas = list(range(count)) + lent_replica_ids(1)
        batch.replan(t, replicas=replicas, abort=replicas if rebalance else ())
        assert batch.end_s >= t
        end = batch.end_s
    aborted = batch.resumes.copy()
    batch.complete()
    assert np.array_equal(batch.kept, lengths)
    assert not np.isnan(batch.finish_s).any() and (batch.finish_s <= end + 1e-9).all()
    if keep_tokens:
        assert np.array_equal(batch.decoded, lengths)
    else:
        assert np.array_equal(batch.decoded[aborted == 0], lengths[aborted == 0])
        assert (batch.decoded >= lengths).all()


def test_partial_rollout_decodes_every_token_once_and_without_it_aborted_ones_start_over():
    lengths, prompts = np.full(8, 100), np.full(8, 10)
    for keep in (True, False):
        batch = _batch(lengths, prompts, [0, 1], keep_tokens=keep)
        batch.replan(batch.end_s / 2, replicas=[0])  # replica 1 leaves half way
        assert (batch.resumes > 0).sum() > 0
        batch.complete()
        wasted = int((batch.decoded - lengths).sum())
        assert (wasted == 0) if keep else (wasted > 0)


def test_a_resumed_request_prefills_its_prompt_and_kept_tokens():
    lengths, prompts = np.array([400, 400]), np.array([50, 70])
    batch = _batch(lengths, prompts, [0, 1])
    batch.replan(batch.end_s / 2, replicas=[0])  # replica 1's request moves to replica 0
    moved = int(np.flatnonzero(batch.resumes)[0])
    kept = int(batch.kept[moved])
    assert 0 < kept < 400
    line = batch.segment.timelines[0]
    # the request that stayed has no prefill left; the moved one pays prompt + kept tokens
    prefill = np.where(line.samples == moved, prompts[moved] + kept, 0)
    expected = plan_replica(
        line.samples, prefill, lengths[line.samples] - batch.kept[line.samples], PARAMS
    )
    assert line.total_s == expected.total_s


@pytest.mark.parametrize("pipeline", ASYNC, ids=lambda p: f"staleness{p['max_staleness_steps']}")
def test_with_no_resizes_partial_rollout_is_todays_pipeline(pipeline):
    before = scenario(pipeline=pipeline)
    after = scenario(pipeline={**pipeline, "partial_rollout": True})
    context = build_context(before)
    a = simulate(before, {"kind": "static"}, context=context)
    b = simulate(after, {"kind": "static"}, context=context)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    pd.testing.assert_frame_equal(a.decisions, b.decisions, check_exact=True)
    assert b.samples is not None and (b.samples["num_resumes"] == 0).all()


def test_resizes_with_batches_in_flight_lose_nothing_and_count_resumes():
    config = scenario(pipeline={"mode": "async", "max_staleness_steps": 1, "partial_rollout": True})
    context = build_context(config)
    plain = simulate(config, {"kind": "static"}, context=context)
    resized = simulate(config, {"kind": "greedy"}, context=context)
    assert resized.summary.num_resizes > 3
    samples = resized.samples
    assert samples is not None
    # one record per sample, with the workload's lengths, the same batches as without resizes
    assert not samples.duplicated(["step", "sample_index"]).any()
    assert len(samples) == len(context.workload.response_tokens)
    assert np.array_equal(samples["response_tokens"], context.workload.response_tokens)
    for column in ("tokens", "num_samples", "rollout_batch_id"):
        assert np.array_equal(resized.steps[column], plain.steps[column])
    assert (samples["num_resumes"] > 0).any()
    assert samples["finish_s"].notna().all()
    # every batch's samples are out before the step that trains on it begins its training
    finish = samples.groupby("step")["finish_s"].max().to_numpy()
    train_start = resized.steps["end_s"] - resized.steps["train_s"] - resized.steps["sync_s"]
    assert (finish <= train_start.to_numpy() + 1e-6).all()


def test_resizes_with_partial_rollout_neither_drain_nor_regenerate():
    base = {"mode": "async", "max_staleness_steps": 1}
    drain = scenario(pipeline=base)
    partial = scenario(pipeline={**base, "partial_rollout": True})
    context = build_context(drain)
    drained = simulate(drain, {"kind": "greedy"}, context=context)
    kept = simulate(partial, {"kind": "greedy"}, context=context)
    assert "rollout_drain" in set(drained.resizes["phase"])
    assert "rollout_drain" not in set(kept.resizes["phase"])
