"""Reading samples a block at a time into their lengths gives what the whole-table read gives:
the same workload, notes, skipped rows and errors (traces/sample_lengths.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dynaresize.traces import sample_lengths
from dynaresize.traces.errors import TraceError
from dynaresize.traces.io import Trace, read_trace, write_trace
from dynaresize.traces.schema import RunMeta
from dynaresize.twin.trace_source import trace_workload


def _steps(num_steps: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "step": np.arange(num_steps),
            "start_s": np.arange(num_steps) * 10.0,
            "end_s": np.arange(num_steps) * 10.0 + 9.0,
            "rollout_s": 5.0,
            "train_s": 3.0,
            "sync_s": 1.0,
            "step_s": 9.0,
            "idle_train_gpu_s": 0.0,
            "idle_rollout_gpu_s": 0.0,
            "rollout_batch_id": np.arange(num_steps),
            "rollout_weights_version": np.arange(num_steps),
            "response_len_p50": 45.0,
            "response_len_p99": 88.0,
            "train_gpus": 2,
            "rollout_gpus": 2,
            "device_roles": [["train", "train", "rollout", "rollout"]] * num_steps,
            "num_samples": 6,
            "tokens": 600,
            "response_len_mean": 50.0,
            "response_len_max": 90.0,
        }
    )


def _samples(num_steps: int, rng: np.random.Generator) -> pd.DataFrame:
    n = num_steps * 6
    return pd.DataFrame(
        {
            "step": np.repeat(np.arange(num_steps), 6),
            "sample_index": np.tile(np.arange(6), num_steps),
            "prompt_tokens": rng.integers(1, 100, n),
            "response_tokens": rng.integers(1, 500, n),
        }
    )


def _both(path, *, lenient=False):
    whole = read_trace(path, lenient=lenient)
    blocks = read_trace(path, lenient=lenient, samples_as_lengths=True)
    assert len(blocks.samples) == 0 and blocks.sample_lengths is not None
    return whole, blocks


def _assert_same(whole: Trace, blocks: Trace) -> None:
    (wa, na), (wb, nb) = trace_workload(whole), trace_workload(blocks)
    assert na == nb
    for name in ("prompt_tokens", "response_tokens", "step_offsets"):
        assert np.array_equal(getattr(wa, name), getattr(wb, name)), name
    assert whole.meta == blocks.meta
    assert whole.skipped == blocks.skipped
    assert whole.workload_notes() == blocks.workload_notes()


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(sample_lengths, "SAMPLE_BLOCK_ROWS", 7)  # many blocks, split steps


def _write(tmp_path, samples: pd.DataFrame, num_steps: int = 12):
    trace = Trace(meta=RunMeta(source="test"), steps=_steps(num_steps), samples=samples)
    return write_trace(tmp_path / "t", trace)


def test_ordered_samples_read_alike(tmp_path):
    path = _write(tmp_path, _samples(12, np.random.default_rng(0)))
    _assert_same(*_both(path))


def test_shuffled_samples_are_put_in_step_order(tmp_path):
    samples = _samples(12, np.random.default_rng(1)).sample(frac=1.0, random_state=3)
    path = _write(tmp_path, samples)
    whole, blocks = _both(path)
    _assert_same(whole, blocks)
    assert not np.all(np.diff(samples["step"].to_numpy()) >= 0)


def test_steps_without_samples_are_inferred_alike(tmp_path):
    samples = _samples(12, np.random.default_rng(2))
    path = _write(tmp_path, samples[samples["step"] != 5])
    whole, blocks = _both(path)
    _assert_same(whole, blocks)
    assert trace_workload(blocks)[1]  # the inference says what it synthesized


def _rewrite_samples(path, samples: pd.DataFrame) -> None:
    pq.write_table(pa.Table.from_pandas(samples, preserve_index=False), path / "samples.parquet")


def test_bad_and_orphan_rows_are_skipped_alike_when_lenient(tmp_path):
    samples = _samples(12, np.random.default_rng(4))
    path = _write(tmp_path, samples)
    bad = samples.copy()
    bad.loc[9, "response_tokens"] = -3
    bad.loc[30, "step"] = 99  # no such step
    _rewrite_samples(path, bad)
    whole, blocks = _both(path, lenient=True)
    _assert_same(whole, blocks)
    assert len(blocks.skipped) == 1 and blocks.skipped[0].where == "row 9"
    assert any("without a step record" in note for note in blocks.meta.notes)


@pytest.mark.parametrize(
    ("row", "column", "value"),
    [(9, "response_tokens", -3), (20, "step", 99), (15, "prompt_tokens", 2.0**60)],
)
def test_strict_errors_name_the_same_row_and_field(tmp_path, row, column, value):
    samples = _samples(12, np.random.default_rng(5))
    path = _write(tmp_path, samples)
    bad = samples.astype({column: np.float64}) if isinstance(value, float) else samples.copy()
    bad.loc[row, column] = value
    _rewrite_samples(path, bad)
    with pytest.raises(TraceError) as whole:
        read_trace(path)
    with pytest.raises(TraceError) as blocks:
        read_trace(path, samples_as_lengths=True)
    assert str(blocks.value) == str(whole.value)
    assert f"row {row}" in str(blocks.value)
