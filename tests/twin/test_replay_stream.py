"""A replay that reads the trace's samples file a block of steps at a time gives exactly what a
replay of the samples held whole gives; a bad value in a late block is named by its row; what
needs every sample at once keeps the held limit, with a clear refusal (traces/workload_stream.py,
twin/trace_source.py); a run kept with one row per resize has the full table's first rows and
the same summary."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from analysis_traces import trace_from_costs
from twin_scenarios import preset_scenario
from typer.testing import CliRunner

from dynaresize.cli import app
from dynaresize.config_io import ConfigError
from dynaresize.traces import sample_lengths, workload_stream
from dynaresize.traces.errors import TraceError
from dynaresize.traces.io import read_trace, write_trace
from dynaresize.traces.sample_lengths import SampleLengths, StreamedSamples
from dynaresize.traces.workload import Workload
from dynaresize.traces.workload_stream import WorkloadStream
from dynaresize.twin import block_costs, trace_source
from dynaresize.twin.analysis.replay import replay_trace
from dynaresize.twin.analysis_context import context_from_config
from dynaresize.twin.costs import CostModels
from dynaresize.twin.costs.memory import ModelConfig
from dynaresize.twin.simulation import build_context, simulate
from dynaresize.twin.trace_source import open_trace, trace_workload, trace_workload_source

NUM_STEPS = 60


def _ragged_workload(seed: int = 3) -> Workload:
    """Steps of many sizes, with runs of equal ones (a block of those takes the statistics'
    fast path, the whole workload the general one)."""
    rng = np.random.default_rng(seed)
    sizes = np.repeat(rng.integers(1, 40, NUM_STEPS // 4), 4)
    sizes[7] = 1
    prompts = [rng.integers(50, 900, n) for n in sizes]
    responses = [np.minimum(8192, rng.lognormal(6.0, 1.0, n).astype(np.int64)) for n in sizes]
    return Workload.from_steps(prompts, responses, name="ragged")


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few steps everywhere a stream is read, steps split across batches."""
    monkeypatch.setattr(sample_lengths, "SAMPLE_BLOCK_ROWS", 37)
    monkeypatch.setattr(workload_stream, "STREAM_BLOCK_SAMPLES", 90)
    monkeypatch.setattr(block_costs, "CONTEXT_BLOCK_SAMPLES", 70)


@pytest.fixture
def trace_dir(tmp_path):
    gpus = np.where(np.arange(NUM_STEPS) < 25, 6, 4)
    trace = trace_from_costs(
        _ragged_workload(),
        costs=CostModels(),
        model=ModelConfig(num_params_b=8),
        train_gpus=gpus,
        noise=0.02,
    )
    return write_trace(tmp_path / "ragged", trace)


def _same_frames(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(
        a.reset_index(drop=True), b.reset_index(drop=True), check_exact=True
    )


def test_streamed_and_held_replays_agree_exactly_on_ragged_steps(trace_dir, small_blocks):
    held = read_trace(trace_dir)
    streamed = open_trace(trace_dir, samples_as_lengths=True)
    assert isinstance(streamed.sample_lengths, StreamedSamples)
    stream, _ = trace_workload_source(streamed)
    assert isinstance(stream, WorkloadStream)
    assert len(list(stream.blocks())) > 5  # read in many blocks, not whole
    whole = trace_workload(held)[0]
    assert np.array_equal(stream.held().response_tokens, whole.response_tokens)
    assert np.array_equal(stream.step_offsets, whole.step_offsets)

    policies = ["hysteresis", "greedy"]
    a = replay_trace(held, context_from_config(None, [held]), policies=policies)
    b = replay_trace(streamed, context_from_config(None, [streamed]), policies=policies)
    _same_frames(a.table, b.table)
    _same_frames(a.predicted_steps, b.predicted_steps)
    _same_frames(a.optimal_schedule, b.optimal_schedule)
    assert a.notes == b.notes
    assert a.fit is not None and b.fit is not None
    assert a.fit.costs == b.fit.costs
    for name, run in a.policies.items():
        other = b.policies[name]
        _same_frames(run.steps, other.steps)
        _same_frames(run.decisions, other.decisions)
        _same_frames(run.resizes, other.resizes)
        assert other.context.held_workload is None
        assert other.context.streamed_workload is not None
        assert run.context.held_workload is not None
        np.testing.assert_array_equal(
            run.context.step_costs.step_s, other.context.step_costs.step_s
        )
        _same_frames(run.context.step_stats, other.context.step_stats)


def _rewrite_samples(path, samples: pd.DataFrame) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pandas(samples, preserve_index=False), path / "samples.parquet")


@pytest.mark.parametrize(("column", "value"), [("response_tokens", -5), ("step", 10**6)])
def test_a_bad_value_in_a_late_block_names_its_file_field_and_row(
    trace_dir, small_blocks, column, value
):
    samples = read_trace(trace_dir).samples
    row = len(samples) - 3  # in the last block of 37 rows
    bad = samples.copy()
    bad.loc[row, column] = value
    _rewrite_samples(trace_dir, bad)
    with pytest.raises(TraceError) as held:
        read_trace(trace_dir)
    with pytest.raises(TraceError) as streamed:
        read_trace(trace_dir, samples_as_lengths=True)
    assert str(streamed.value) == str(held.value)
    text = str(streamed.value)
    assert "samples.parquet" in text and f"row {row}" in text and column in text


def test_a_bad_value_is_an_exit_2_with_no_output(trace_dir, small_blocks, tmp_path):
    samples = read_trace(trace_dir).samples
    bad = samples.copy()
    bad.loc[len(samples) - 1, "prompt_tokens"] = -1
    _rewrite_samples(trace_dir, bad)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["run", "--mode", "replay", "--trace", str(trace_dir), "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    assert f"row {len(samples) - 1}" in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_samples_out_of_order_are_held_and_sorted(trace_dir, small_blocks):
    samples = read_trace(trace_dir).samples
    _rewrite_samples(trace_dir, samples.iloc[::-1])
    trace = open_trace(trace_dir, samples_as_lengths=True)
    assert isinstance(trace.sample_lengths, SampleLengths)
    workload, _ = trace_workload_source(trace)
    assert isinstance(workload, Workload)
    assert np.array_equal(workload.response_tokens, samples["response_tokens"].to_numpy())


def test_what_needs_every_sample_keeps_the_held_limit(trace_dir, monkeypatch):
    trace = open_trace(trace_dir, samples_as_lengths=True)
    total = int(trace.steps["num_samples"].sum())
    monkeypatch.setattr(trace_source, "MAX_WORKLOAD_SAMPLES", total - 1)
    context = context_from_config(None, [trace])
    replay_trace(trace, context, policies=["hysteresis"])  # streamed: within its own limit
    with pytest.raises(ConfigError, match=r"more than a replay can hold .*--mechanisms"):
        replay_trace(trace, context, policies=["hysteresis"], mechanisms=True)
    result = CliRunner().invoke(
        app, ["run", "--mode", "replay", "--trace", str(trace_dir), "--mechanisms"]
    )
    assert result.exit_code == 2, result.output
    assert f"({total - 1:,}): --mechanisms" in result.output
    monkeypatch.setattr(trace_source, "MAX_STREAMED_SAMPLES", total - 1)
    result = CliRunner().invoke(app, ["run", "--mode", "replay", "--trace", str(trace_dir)])
    assert result.exit_code == 2 and "more than a replay can read" in result.output


@pytest.mark.parametrize("mode", ["one_step_off", "async"])
def test_one_row_per_resize_is_the_first_phase_row_and_the_same_summary(mode):
    config = preset_scenario(
        "high_variance",
        samples_per_step=32,
        num_steps=120,
        pipeline={"mode": mode, "max_staleness_steps": 1},
    )
    context = build_context(config)
    full = simulate(config, {"kind": "greedy"}, context=context)
    heads = simulate(config, {"kind": "greedy"}, context=context, phase_rows=False)
    assert full.summary.num_resizes >= 2
    assert len(full.resizes) > len(heads.resizes) == full.summary.num_resizes
    first = full.resizes.groupby("resize_id", sort=False).head(1)
    _same_frames(first, heads.resizes)
    assert heads.summary == full.summary
    _same_frames(full.steps, heads.steps)
