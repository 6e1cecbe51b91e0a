"""The stored runs of tests/twin/backtests/ come out again cell for cell (backtest_cases.py).

Columns a table gained after its file was written are not compared here (the file's header
names the columns it pins); that they stay empty for runs that do not use them is checked where
they were added.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from backtest_cases import CASES, TABLES, case_runs, stored_path, table_text


@pytest.fixture(scope="module", params=CASES, ids=lambda case: case.name)
def case_and_runs(request):
    return request.param, case_runs(request.param)


def _first_difference(stored: str, fresh: str, path: Path) -> str:
    diff = difflib.unified_diff(
        stored.splitlines(), fresh.splitlines(), "stored", "now", n=0, lineterm=""
    )
    lines = list(diff)[:8]
    return f"{path} differs:\n" + "\n".join(line[:300] for line in lines)


def test_every_stored_table_comes_out_again_cell_for_cell(case_and_runs):
    case, runs = case_and_runs
    stored_runs = {p.name.split(".")[0] for p in stored_path(case, "x", "steps").parent.iterdir()}
    assert stored_runs == set(runs), "the case's runs differ from the stored ones"
    for run, result in runs.items():
        for table in TABLES:
            path = stored_path(case, run, table)
            stored = path.read_text()
            header = stored.splitlines()[0].split(",") if stored.strip() else None
            fresh = table_text(getattr(result, table), header)
            assert fresh == stored, _first_difference(stored, fresh, path)
