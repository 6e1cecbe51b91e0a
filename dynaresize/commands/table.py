"""Print a comparison table on the terminal, drawn by rich (which typer depends on)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

_PERCENT_COLUMNS = {"gpu_idle_fraction"}
_SIGNED_PERCENT_COLUMNS = {"change_vs_best_static"}
_HEADERS = {
    "total_s": "total (s)",
    "steps_per_hour": "steps/h",
    "tokens_per_s": "tokens/s",
    "gpu_idle_fraction": "GPU idle",
    "num_resizes": "resizes",
    "thrash_count": "thrash",
    "resize_time_s": "resizing (s)",
    "speedup_vs_best_static": "vs best static",
    "speedup_vs_baseline": "vs baseline",
    "regret_s": "regret (s)",
    "regret_pct": "regret",
    "change_vs_best_static": "vs best static",
    "num_lends": "lends",
}


def _header(column: str) -> str:
    return _HEADERS.get(column, column)


def _cell(column: str, value: Any) -> str:
    """One table cell as text; `value` is whatever the comparison table holds there."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if column in _PERCENT_COLUMNS:
        return f"{100 * float(value):.1f}%"
    if column in _SIGNED_PERCENT_COLUMNS:
        return f"{100 * float(value):+.1f}%"
    if column.endswith("_pct"):
        return f"{float(value):.1f}%"
    if column.startswith("speedup"):
        return f"{float(value):.3f}x"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)


def format_rows(table: pd.DataFrame) -> list[list[str]]:
    return [[_cell(c, v) for c, v in zip(table.columns, row, strict=True)] for row in table.values]


def print_table(table: pd.DataFrame, *, title: str) -> None:
    from rich.console import Console, JustifyMethod
    from rich.table import Table

    rows = format_rows(table)
    out = Table(title=title)
    for column in table.columns:
        justify: JustifyMethod = "left" if column in ("name", "kind", "mechanism") else "right"
        out.add_column(_header(column), justify=justify, no_wrap=True)
    for r in rows:
        out.add_row(*r)
    Console(width=max(150, Console().width)).print(out)
