"""A generated workload larger than one block is costed a block of steps at a time and never held
whole: the context, every run's records and the run folder equal those of the whole workload,
and no more than one block's per-sample arrays are alive at once."""

from __future__ import annotations

import filecmp
import weakref

import numpy as np
import pandas as pd
import pytest
from twin_scenarios import scenario

from dynaresize.policies import parse_policy_config
from dynaresize.traces import workload_parquet
from dynaresize.traces.workload import Workload
from dynaresize.twin import block_costs
from dynaresize.twin.comparison import run_comparison, write_comparison
from dynaresize.twin.config import MAX_SIMULATED_SAMPLES, MAX_STREAMED_SAMPLES, ScenarioConfig
from dynaresize.twin.context_cache import clear_context_cache
from dynaresize.twin.simulation import build_context, simulate

STEPS = 230
PER_STEP = 16


def _config(**overrides) -> ScenarioConfig:
    workload = {"preset": "high_variance", "samples_per_step": PER_STEP}
    return scenario(simulation={"num_steps": STEPS}, workload=workload, **overrides)


def _contexts(monkeypatch, block_samples: int, **overrides):
    """The context built whole and built in blocks of `block_samples` samples."""
    config = _config(**overrides)
    clear_context_cache()
    whole = build_context(config)
    monkeypatch.setattr(block_costs, "CONTEXT_BLOCK_SAMPLES", block_samples)
    clear_context_cache()
    streamed = build_context(config)
    clear_context_cache()
    return config, whole, streamed


@pytest.mark.parametrize("block_samples", [PER_STEP, 7 * PER_STEP + 3, 100 * PER_STEP])
def test_a_context_built_in_blocks_equals_the_whole_one(monkeypatch, block_samples):
    _, whole, streamed = _contexts(monkeypatch, block_samples)
    assert whole.held_workload is not None and streamed.held_workload is None
    for name in ("rollout_s", "train_s", "sync_s", "step_s"):
        assert np.array_equal(getattr(whole.step_costs, name), getattr(streamed.step_costs, name))
    assert np.array_equal(whole.predicted_step_s, streamed.predicted_step_s)
    pd.testing.assert_frame_equal(whole.step_stats, streamed.step_stats, check_exact=True)
    pd.testing.assert_frame_equal(whole.baselines.table, streamed.baselines.table)
    # the workload asked for is drawn again: the same numbers
    again = streamed.workload
    assert np.array_equal(again.response_tokens, whole.workload.response_tokens)
    assert np.array_equal(again.prompt_tokens, whole.workload.prompt_tokens)
    assert streamed.num_samples == whole.num_samples == STEPS * PER_STEP


@pytest.mark.parametrize("mode", ["sync", "one_step_off", "async"])
def test_runs_on_a_streamed_context_equal_runs_on_the_whole_one(monkeypatch, mode):
    config, whole, streamed = _contexts(monkeypatch, 9 * PER_STEP, pipeline={"mode": mode})
    for kind in ("hysteresis", "greedy"):
        policy = parse_policy_config({"kind": kind})
        a = simulate(config, policy, context=whole)
        b = simulate(config, policy, context=streamed)
        for table in ("steps", "resizes", "decisions"):
            pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table), check_exact=True)
        assert a.summary == b.summary


def test_the_run_folder_of_a_streamed_context_is_the_same_file_for_file(monkeypatch, tmp_path):
    config = _config()
    policies = [parse_policy_config({"kind": kind}) for kind in ("hysteresis", "greedy")]
    # several row groups, cut across the blocks' edges
    monkeypatch.setattr(workload_parquet, "ROWS_PER_CHUNK", 5 * PER_STEP + 1)
    folders = []
    for block_samples in (block_costs.CONTEXT_BLOCK_SAMPLES, 11 * PER_STEP):
        monkeypatch.setattr(block_costs, "CONTEXT_BLOCK_SAMPLES", block_samples)
        clear_context_cache()
        out = tmp_path / f"blocks-{block_samples}"
        comparison = run_comparison(config, policies)
        write_comparison(comparison, out, resolved_config={}, timeline_svg=False)
        folders.append(out)
    clear_context_cache()
    names = sorted(p.relative_to(folders[0]) for p in folders[0].rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(folders[1]) for p in folders[1].rglob("*") if p.is_file())
    assert any(name.name == "samples.parquet" for name in names)
    for name in names:
        assert filecmp.cmp(folders[0] / name, folders[1] / name, shallow=False), name


def test_no_more_than_one_block_of_samples_is_alive_at_once(monkeypatch):
    """Each block's per-sample arrays are let go once its steps are costed: counted by weak
    references to every block handed to the costing, at every call."""
    blocks: list[weakref.ref[Workload]] = []
    most_alive = 0
    costed = block_costs.block_costs

    def counting(config, costs, block, *, starts_run):
        nonlocal most_alive
        blocks.append(weakref.ref(block))
        most_alive = max(most_alive, sum(ref() is not None for ref in blocks))
        return costed(config, costs, block, starts_run=starts_run)

    monkeypatch.setattr(block_costs, "block_costs", counting)
    monkeypatch.setattr(block_costs, "CONTEXT_BLOCK_SAMPLES", 10 * PER_STEP)
    clear_context_cache()
    streamed = build_context(_config())
    clear_context_cache()
    assert streamed.held_workload is None
    assert len(blocks) == -(-STEPS // 10)
    assert most_alive == 1
    assert all(ref() is None for ref in blocks)


def test_a_sample_level_run_is_held_whole_and_keeps_the_held_limit(monkeypatch):
    monkeypatch.setattr(block_costs, "CONTEXT_BLOCK_SAMPLES", PER_STEP)
    clear_context_cache()
    context = build_context(_config(pipeline={"mode": "async", "partial_rollout": True}))
    clear_context_cache()
    assert context.held_workload is not None
    steps = MAX_SIMULATED_SAMPLES // 128 + 1
    with pytest.raises(ValueError, match="sample by sample"):
        scenario(
            simulation={"num_steps": steps},
            workload={"preset": "high_variance", "samples_per_step": 128},
            pipeline={"mode": "async", "partial_rollout": True},
        )


def test_a_million_steps_of_128_samples_fit_a_step_level_run_and_more_is_refused():
    fits = scenario(simulation={"num_steps": 1_000_000}, workload={"samples_per_step": 128})
    assert fits.simulation.num_steps == 1_000_000
    with pytest.raises(ValueError, match=f"{MAX_STREAMED_SAMPLES:,}"):
        scenario(simulation={"num_steps": 1_000_000}, workload={"samples_per_step": 1001})
