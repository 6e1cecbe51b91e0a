"""samples.parquet written straight from a workload: the file `write_trace` writes for the
workload's samples table, byte for byte, in one row group or in several."""

from __future__ import annotations

import pandas as pd
import pytest
from run_records_factory import make_run

from dynaresize.traces import parquet_io, workload_parquet
from dynaresize.traces.io import Trace, read_trace, write_trace
from dynaresize.traces.schema import RunMeta
from dynaresize.traces.synthetic import generate_workload, preset
from dynaresize.traces.workload import Workload
from dynaresize.traces.workload_inference import workload_samples
from dynaresize.traces.workload_parquet import write_workload_samples


@pytest.mark.parametrize("rows_per_chunk", [1 << 20, 1000, 777])
@pytest.mark.parametrize("num_steps", [0, 1, 40])
def test_same_bytes_as_the_samples_table_written_by_write_trace(
    tmp_path, monkeypatch, rows_per_chunk, num_steps
):
    monkeypatch.setattr(parquet_io, "ROWS_PER_CHUNK", rows_per_chunk)
    monkeypatch.setattr(workload_parquet, "ROWS_PER_CHUNK", rows_per_chunk)
    workload = generate_workload(preset("high_variance"), num_steps, 3)
    steps, _, _ = make_run()
    meta = RunMeta(source="twin", num_gpus=8)
    write_trace(
        tmp_path / "trace", Trace(meta=meta, steps=steps, samples=workload_samples(workload))
    )
    written = write_workload_samples(tmp_path / "samples.parquet", workload)
    assert written.read_bytes() == (tmp_path / "trace" / "samples.parquet").read_bytes()


def test_ragged_steps_read_back_as_their_samples(tmp_path):
    workload = generate_workload(preset("low_variance"), 6, 1).slice_steps(2, 5)
    ragged = Workload.from_steps(
        [workload.step(k)[0][: k + 1] for k in range(3)],
        [workload.step(k)[1][: k + 1] for k in range(3)],
    )
    steps, _, _ = make_run()
    folder = tmp_path / "trace"
    write_trace(folder, Trace(meta=RunMeta(source="twin", num_gpus=8), steps=steps))
    write_workload_samples(folder / "samples.parquet", ragged)
    samples = read_trace(folder).samples
    assert list(samples["step"]) == [0, 1, 1, 2, 2, 2]
    assert list(samples["sample_index"]) == [0, 0, 1, 0, 1, 2]
    assert list(samples["response_tokens"]) == list(ragged.response_tokens)
    assert samples["finish_s"].isna().all() and pd.isna(samples["device"]).all()
