"""What every plot shares: a figure on the Agg canvas (never pyplot's global state), the check
that a table has the columns a plot needs, and record values printed the same whether they are
enum members or text."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def new_figure(*, width_in: float, height_in: float) -> Figure:
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def require_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} lacks column(s) {', '.join(missing)}")


def as_text(value: object) -> str:
    """Enum members (as read back from records) and plain strings print the same."""
    return str(getattr(value, "value", value))
