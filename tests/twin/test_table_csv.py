"""A table written a column at a time has the bytes `DataFrame.to_csv(index=False)` writes,
for every column type a replay's decisions table holds and for the tables pandas writes itself
(values the csv module quotes, other types, one column)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dynaresize.twin.analysis import table_csv
from dynaresize.twin.analysis.table_csv import _writable, write_table_csv


def _decisions_like(num_rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    floats = rng.lognormal(0.0, 6.0, num_rows) * rng.choice([-1.0, 1.0], num_rows)
    floats[::7] = np.nan
    floats[1::11] = np.inf
    floats[2::13] = -0.0
    floats[3::17] = 1e16
    floats[4::19] = 1e-5
    resize_id = pd.array(rng.integers(0, 50, num_rows), dtype="Int64")
    resize_id[::3] = pd.NA
    text = pd.Series(rng.choice(["hold", "resize", "", "signal to_train 1/3"], num_rows))
    return pd.DataFrame(
        {
            "run": pd.Series(["recorded (measured)"] * num_rows, dtype="str"),
            "step": np.arange(num_rows, dtype=np.int64) * 10**12,
            "time_s": floats,
            "decision": text.astype("str").mask(np.arange(num_rows) % 5 == 0),
            "to_allocation": pd.Series([None, "4:4"] * (num_rows // 2), dtype=object),
            "resize_id": resize_id,
            "lend": rng.random(num_rows) < 0.5,
            "ratio": rng.random(num_rows).astype(np.float32),
        }
    )


@pytest.mark.parametrize("num_rows", [0, 1, 2, 1000])
def test_bytes_equal_pandas(tmp_path, monkeypatch, num_rows):
    monkeypatch.setattr(table_csv, "CHUNK_ROWS", 300)  # several chunks, the last one short
    table = _decisions_like(num_rows)
    assert _writable(table)  # written column by column, not by pandas
    write_table_csv(table, tmp_path / "ours.csv")
    table.to_csv(tmp_path / "pandas.csv", index=False)
    assert (tmp_path / "ours.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()


@pytest.mark.parametrize(
    "column",
    [
        pd.Series(["a,b", "c"], dtype="str"),
        pd.Series(['say "hi"', "c"], dtype=object),
        pd.Series(["two\nlines", "c"]),
        pd.Series([1, "x"], dtype=object),
        pd.Series(pd.Categorical(["a", "b"])),
        pd.Series(pd.to_datetime(["2026-12-07", "2026-12-08"])),
    ],
)
def test_tables_pandas_writes_itself_keep_its_bytes(tmp_path, column):
    table = pd.DataFrame({"step": [0, 1], "value": column})
    assert not _writable(table)
    write_table_csv(table, tmp_path / "ours.csv")
    table.to_csv(tmp_path / "pandas.csv", index=False)
    assert (tmp_path / "ours.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()


def test_one_column_and_quoted_names_are_left_to_pandas():
    assert not _writable(pd.DataFrame({"step": [0]}))
    assert not _writable(pd.DataFrame({"a,b": [0], "c": [1]}))
