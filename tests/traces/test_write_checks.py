"""Writing a trace checks what it writes, however its columns are held: Arrow-backed text and
role lists shared between steps are checked without a Python step per row, yet a bad value
still stops the write naming its row and field, and what is written reads back as checked."""

from __future__ import annotations

import pandas as pd
import pytest
from twin_scenarios import scenario

from dynaresize.policies import parse_policy_config
from dynaresize.traces.errors import TraceError
from dynaresize.traces.io import Trace, read_trace, write_trace
from dynaresize.twin.simulation import simulate


@pytest.fixture(scope="module")
def run():
    return simulate(scenario(), parse_policy_config({"kind": "greedy"}))


def _trace(run, **tables) -> Trace:
    frames = {"steps": run.steps, "resizes": run.resizes, "decisions": run.decisions}
    return Trace(**{**frames, **tables})


def test_what_is_written_reads_back_as_checked(run, tmp_path):
    assert isinstance(run.resizes["phase"].dtype, pd.StringDtype)  # Arrow-backed text
    trace = _trace(run)
    write_trace(tmp_path / "t", trace)
    back = read_trace(tmp_path / "t")
    checked = trace.validated()
    for table in ("steps", "resizes", "decisions"):
        pd.testing.assert_frame_equal(back.table(table), checked.table(table))


def test_a_bad_text_value_stops_the_write_at_its_row(run, tmp_path):
    resizes = run.resizes.copy()
    resizes.loc[3, "phase"] = "teleport"
    assert isinstance(resizes["phase"].dtype, pd.StringDtype)
    with pytest.raises(TraceError, match="teleport") as err:
        write_trace(tmp_path / "t", _trace(run, resizes=resizes))
    assert "row 3" in str(err.value) and "phase" in str(err.value)
    missing = run.resizes.copy()
    missing.loc[2, "strategy"] = None
    with pytest.raises(TraceError, match="missing") as err:
        write_trace(tmp_path / "t", _trace(run, resizes=missing))
    assert "row 2" in str(err.value) and "strategy" in str(err.value)
    assert not (tmp_path / "t").exists()


def test_a_bad_role_in_a_shared_role_list_stops_the_write(run, tmp_path):
    steps = run.steps.copy()
    shared = ["train", "nap", *(["rollout"] * (len(steps["device_roles"].iloc[0]) - 2))]
    roles = steps["device_roles"].tolist()
    roles[5] = roles[9] = shared  # one list object, two steps
    steps["device_roles"] = roles
    with pytest.raises(TraceError, match="roles") as err:
        write_trace(tmp_path / "t", _trace(run, steps=steps))
    assert "row 5" in str(err.value)


def test_a_long_table_checked_a_chunk_at_a_time_names_its_row_in_the_whole(
    run, tmp_path, monkeypatch
):
    from dynaresize.traces import parquet_io

    monkeypatch.setattr(parquet_io, "ROWS_PER_CHUNK", 4)
    resizes = run.resizes.copy()
    assert len(resizes) > 9
    write_trace(tmp_path / "good", _trace(run, resizes=resizes))
    back = read_trace(tmp_path / "good")
    pd.testing.assert_frame_equal(back.resizes, _trace(run).validated().resizes)
    resizes.loc[9, "phase"] = "teleport"
    with pytest.raises(TraceError, match="teleport") as err:
        write_trace(tmp_path / "t", _trace(run, resizes=resizes))
    assert "row 9" in str(err.value) and "phase" in str(err.value)
    assert not (tmp_path / "t").exists()
