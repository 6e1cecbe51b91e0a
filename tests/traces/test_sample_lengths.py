"""Reading samples a block at a time into their lengths gives what the whole-table read gives:
the same workload, notes, skipped rows and errors (traces/sample_lengths.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dynaresize.traces import sample_lengths
from dynaresize.traces.column_specs import column_specs, upper_bound
from dynaresize.traces.errors import TraceError
from dynaresize.traces.io import Trace, read_trace, write_trace
from dynaresize.traces.schema import SCHEMA_VERSION, RunMeta, SampleRecord
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


def _numpy_clean(column: pa.ChunkedArray, spec) -> bool:
    """The value-by-value check of an integer column that the least and greatest values
    replace: every value as float64 against the field's bounds."""
    if column.null_count and not spec.nullable:
        return False
    nums = column.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    finite = np.isfinite(nums)
    if spec.ge is not None and (finite & (nums < spec.ge)).any():
        return False
    limit, _ = upper_bound(spec.name)
    if (finite & (nums > limit)).any():
        return False
    return spec.name != "schema_version" or bool((nums == SCHEMA_VERSION).all())


_EDGE_VALUES = [None, -1, 0, 1, 2, 2**53 - 1, 2**53, 2**53 + 1, 2**53 + 2, 2**62]


@pytest.mark.parametrize("name", [s.name for s in column_specs(SampleRecord)])
def test_integer_columns_clean_by_extremes_as_by_every_value(name):
    spec = next(s for s in column_specs(SampleRecord) if s.name == name)
    rng = np.random.default_rng(7)
    columns = [[], [None], [None, None], [1, 1, 1], [1, None]]
    columns += [list(rng.choice(np.array(_EDGE_VALUES, dtype=object), 5)) for _ in range(300)]
    for values in columns:
        column = pa.chunked_array([pa.array(values, type=pa.int64())])
        expected = _numpy_clean(column, spec)
        assert sample_lengths._numeric_clean(column, spec) is expected, (name, values)
