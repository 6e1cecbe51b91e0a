"""A long run's timeline reduced to what the picture's pixel columns can show.

A timeline of a million steps drawn point by point is a file of hundreds of MB that no browser
draws faster than it could show 900 columns. Each function here keeps, per pixel column, what
a reader can see there: a line's first, lowest, highest and last points (its envelope, drawn
exactly as the full line would be at that width), the value an allocation holds at a column's
end, and whether any resize stall touches a column. Pure numpy; imports nothing of the project.
"""

from __future__ import annotations

import numpy as np

__all__ = ["column_envelope", "column_of", "columns_held", "columns_touched"]


def column_of(x_px: np.ndarray, *, left: float, width: int) -> np.ndarray:
    """Pixel column (0 .. width - 1) of each x coordinate of a panel starting at `left`."""
    return np.clip(np.floor(np.asarray(x_px, float) - left), 0, width - 1).astype(np.int64)


def column_envelope(columns: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Indices of the points of a line to draw, in order: per pixel column (`columns` never
    falling) its first, lowest, highest and last point, each once."""
    n = len(columns)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, columns[1:] != columns[:-1]])
    ends = np.r_[starts[1:], n] - 1
    group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n]))
    by_value = np.lexsort((np.nan_to_num(values, nan=-np.inf), group))
    lowest, highest = by_value[starts], by_value[ends]
    picked = np.sort(np.column_stack([starts, lowest, highest, ends]), axis=1).ravel()
    return picked[np.r_[True, picked[1:] != picked[:-1]]]


def columns_held(start_s: np.ndarray, end_s: float, *, width: int) -> tuple[np.ndarray, np.ndarray]:
    """For a step function (step i holds from start_s[i] to the next start): the left edge of
    each of `width` equal columns of [start_s[0], end_s] and the step held just before each
    column's right end, consecutive columns holding the same step merged."""
    lo = float(start_s[0])
    edges = lo + (end_s - lo) * np.arange(width + 1) / width
    held = np.clip(np.searchsorted(start_s, edges[1:], side="left") - 1, 0, len(start_s) - 1)
    keep = np.r_[True, held[1:] != held[:-1]]
    return edges[:-1][keep], held[keep]


def columns_touched(first: np.ndarray, last: np.ndarray, *, width: int) -> list[tuple[int, int]]:
    """Runs (first column, last column) of the columns any of the spans [first, last] covers."""
    count = np.zeros(width + 1, dtype=np.int64)
    np.add.at(count, np.clip(first, 0, width - 1), 1)
    np.add.at(count, np.clip(last, 0, width - 1) + 1, -1)
    covered = np.cumsum(count[:-1]) > 0
    edges = np.flatnonzero(np.diff(np.r_[0, covered.astype(np.int8), 0]))
    return [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2], strict=True)]
