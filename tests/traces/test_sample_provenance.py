"""Samples carry where their prompt came from: the dataset row's `data_source` and its
`extra_info.index`, optional fields of the samples table. They round-trip through both formats,
a wrong type is refused naming the line and field, and traces written before the fields existed
(the shipped live traces, a Parquet table without the columns, JSONL lines without the keys)
still read, with both empty."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from trace_factory import small_trace

from dynaresize.traces.errors import TraceError
from dynaresize.traces.io import Trace, read_trace, write_trace
from dynaresize.traces.schema import SampleRecord

FIELDS = ("data_source", "extra_info_index")
SHIPPED = Path(str(files("dynaresize") / "data" / "live_cpu_long_tail" / "trace"))


def _provenance(num_samples: int) -> dict[str, list[str | None]]:
    """One dataset with integer indices (veRL's preprocessing), one with string ids, and
    samples from no dataset file at all."""
    return {
        "data_source": [["openai/gsm8k", "math_dapo", None][i % 3] for i in range(num_samples)],
        "extra_info_index": [[str(i), f"id-{i}-ü", None][i % 3] for i in range(num_samples)],
    }


def _with_provenance() -> Trace:
    trace = small_trace()
    samples = trace.samples.copy()
    for field, values in _provenance(len(samples)).items():
        samples[field] = pd.Series(values, dtype=object)
    trace.samples = samples
    return trace


@pytest.mark.parametrize("name", ["run", "run.jsonl"])
def test_sample_provenance_round_trips_both_formats(tmp_path, name):
    trace = _with_provenance()
    write_trace(tmp_path / name, trace)
    back = read_trace(tmp_path / name)
    expected = _provenance(len(trace.samples))
    for field in FIELDS:
        assert back.samples[field].tolist() == expected[field]
    assert back.samples["extra_info_index"].iloc[0] == "0"  # text, as written


def test_a_record_takes_the_fields_and_defaults_them_to_none():
    record = SampleRecord(step=0, sample_index=0, prompt_tokens=1, response_tokens=2)
    assert record.data_source is None and record.extra_info_index is None
    named = record.model_copy(update={"data_source": "gsm8k", "extra_info_index": "17"})
    assert SampleRecord.model_validate(named.model_dump()) == named


def test_a_non_text_data_source_names_the_line_and_field(tmp_path):
    path = tmp_path / "run.jsonl"
    write_trace(path, small_trace())
    lines = path.read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if '"record":"sample"' in line)
    sample = json.loads(lines[k])
    sample["data_source"] = 3
    lines[k] = json.dumps(sample)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError) as err:
        read_trace(path)
    assert f"line {k + 1}" in str(err.value) and "'data_source'" in str(err.value)


def test_the_shipped_traces_written_before_the_fields_still_read():
    trace = read_trace(SHIPPED)
    assert len(trace.samples) > 0
    assert pq.read_schema(SHIPPED / "samples.parquet").get_field_index("data_source") == -1
    for field in FIELDS:
        assert trace.samples[field].isna().all()


def test_older_tables_without_the_columns_or_keys_still_read(tmp_path):
    trace = small_trace()
    write_trace(tmp_path / "run", trace)
    table = pq.read_table(tmp_path / "run" / "samples.parquet")
    pq.write_table(table.drop_columns(list(FIELDS)), tmp_path / "run" / "samples.parquet")
    write_trace(tmp_path / "run.jsonl", trace)
    lines = []
    for line in (tmp_path / "run.jsonl").read_text().splitlines():
        record = json.loads(line)
        for field in FIELDS:
            record.pop(field, None)
        lines.append(json.dumps(record, separators=(",", ":")))
    (tmp_path / "run.jsonl").write_text("\n".join(lines) + "\n")
    for path in (tmp_path / "run", tmp_path / "run.jsonl"):
        back = read_trace(path)
        assert back.samples[list(FIELDS)].isna().all().all()
        assert back.to_workload().response_tokens.tolist() == (
            trace.to_workload().response_tokens.tolist()
        )
