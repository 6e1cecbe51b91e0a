"""A run's timeline as an SVG picture, written from its step and resize tables without a
plotting library.

A run folder gets a picture of what happened: the step time of every step (with its rollout and
training stages and a marker at every resize) and the train:rollout split over run time (with
the resize stalls shaded). Drawing it with matplotlib took longer than simulating the run, most
of it in importing matplotlib; this writer produces the same two panels as plain SVG text in a
few milliseconds, and any browser shows it. `dynaresize.twin.plots.plot_timeline` still draws
the matplotlib figure for notebooks.

A run of more steps than a panel has pixel columns is drawn a column at a time
(`timeline_columns`): each line's envelope (first, lowest, highest and last point of every
column), one resize marker per column that holds resizes (the longest stall, the last target;
labels kept apart), the split each column ends on, and the columns a stall touches. The file
stays a few hundred kB at a million steps; a shorter run is drawn point for point as before.

What it may import: numpy and pandas; nothing of the project but `traces/` itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from pathlib import Path

import numpy as np
import pandas as pd

from .timeline_columns import column_envelope, column_of, columns_held, columns_touched

__all__ = ["timeline_svg", "write_timeline_svg"]

WIDTH, HEIGHT = 1000, 660
TRAIN_COLOR = "#1f77b4"
ROLLOUT_COLOR = "#ff7f0e"
CRITICAL_COLOR = "#d62728"
RESIZE_COLOR = "#9467bd"


@dataclass(frozen=True)
class _Panel:
    """A plotting area: pixel box and the data range it maps."""

    left: float
    top: float
    width: float
    height: float
    x_range: tuple[float, float]
    y_range: tuple[float, float]

    def x(self, value: np.ndarray | float) -> np.ndarray:
        lo, hi = self.x_range
        return self.left + (np.asarray(value, float) - lo) / (hi - lo) * self.width

    def y(self, value: np.ndarray | float) -> np.ndarray:
        lo, hi = self.y_range
        return self.top + self.height - (np.asarray(value, float) - lo) / (hi - lo) * self.height


def _nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round tick values covering [lo, hi]: steps of 1, 2 or 5 times a power of ten."""
    span = hi - lo if hi > lo else 1.0
    raw = span / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _label(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 or value == int(value) else f"{value:.3g}"


def _points(xs: np.ndarray, ys: np.ndarray) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys, strict=True))


def _axes(panel: _Panel, *, x_label: str, y_label: str, title: str) -> list[str]:
    out = [
        f'<rect x="{panel.left:.1f}" y="{panel.top:.1f}" width="{panel.width:.1f}" '
        f'height="{panel.height:.1f}" fill="none" stroke="#444"/>',
        f'<text x="{panel.left + panel.width / 2:.1f}" y="{panel.top - 8:.1f}" '
        f'text-anchor="middle" font-size="13">{escape(title)}</text>',
    ]
    for value in _nice_ticks(*panel.x_range):
        x = float(panel.x(value))
        bottom = panel.top + panel.height
        out.append(
            f'<line x1="{x:.1f}" y1="{panel.top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" '
            'stroke="#ddd"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{bottom + 14:.1f}" text-anchor="middle" '
            f'font-size="10">{_label(value)}</text>'
        )
    for value in _nice_ticks(*panel.y_range, count=4):
        y = float(panel.y(value))
        right = panel.left + panel.width
        out.append(
            f'<line x1="{panel.left:.1f}" y1="{y:.1f}" x2="{right:.1f}" y2="{y:.1f}" '
            'stroke="#ddd"/>'
        )
        out.append(
            f'<text x="{panel.left - 6:.1f}" y="{y + 3:.1f}" text-anchor="end" '
            f'font-size="10">{_label(value)}</text>'
        )
    out.append(
        f'<text x="{panel.left + panel.width / 2:.1f}" '
        f'y="{panel.top + panel.height + 30:.1f}" text-anchor="middle" '
        f'font-size="11">{escape(x_label)}</text>'
    )
    mid = panel.top + panel.height / 2
    out.append(
        f'<text x="{panel.left - 42:.1f}" y="{mid:.1f}" text-anchor="middle" '
        f'font-size="11" transform="rotate(-90 {panel.left - 42:.1f} {mid:.1f})">'
        f"{escape(y_label)}</text>"
    )
    return out


def _legend(panel: _Panel, entries: list[tuple[str, str, str]]) -> list[str]:
    """(label, colour, dash) entries in a row at the top left of the panel."""
    out, x = [], panel.left + 8
    y = panel.top + 14
    for label, color, dash in entries:
        out.append(
            f'<line x1="{x:.1f}" y1="{y - 4:.1f}" x2="{x + 18:.1f}" y2="{y - 4:.1f}" '
            f'stroke="{color}" stroke-width="3" stroke-dasharray="{dash}"/>'
        )
        out.append(f'<text x="{x + 22:.1f}" y="{y:.1f}" font-size="10">{escape(label)}</text>')
        x += 30 + 6 * len(label)
    return out


def _resize_record_spans(resizes: pd.DataFrame) -> pd.DataFrame:
    """`_resize_spans` from resize records, a column at a time: a resize's critical span is
    that of its critical phases (of all phases if no resize of the run has one); a resize with
    none where others have them has no span."""
    ids = resizes["resize_id"].to_numpy(np.int64)
    start, end = resizes["start_s"].to_numpy(float), resizes["end_s"].to_numpy(float)
    critical = resizes["critical"].to_numpy(bool)
    used = critical if critical.any() else np.ones(len(ids), dtype=bool)
    unique, inverse = np.unique(ids, return_inverse=True)
    lo, hi = np.full(len(unique), np.inf), np.full(len(unique), -np.inf)
    np.minimum.at(lo, inverse[used], start[used])
    np.maximum.at(hi, inverse[used], end[used])
    by_start = np.lexsort((start, inverse))
    first = by_start[np.searchsorted(inverse[by_start], np.arange(len(unique)))]
    targets = resizes["to_allocation"].to_numpy(object)[first]
    keep = np.isfinite(lo)
    return pd.DataFrame(
        {
            "effective_step": resizes["step"].to_numpy(np.int64)[first][keep] + 1,
            "to_allocation": [str(getattr(v, "value", v)) for v in targets[keep]],
            "start_s": lo[keep],
            "end_s": hi[keep],
        }
    )


def _resize_spans(steps: pd.DataFrame, resizes: pd.DataFrame | None) -> pd.DataFrame:
    """One row per resize: the step it took effect before, its target and its critical span
    (from the resize records, else from the steps' resize_id marks)."""
    if resizes is not None and len(resizes):
        return _resize_record_spans(resizes)
    marked = steps[steps["resize_id"].notna()] if "resize_id" in steps else steps.iloc[:0]
    return pd.DataFrame(
        {
            "effective_step": marked["step"].astype(int).to_numpy(),
            "to_allocation": [
                f"{t}:{r}"
                for t, r in zip(marked["train_gpus"], marked["rollout_gpus"], strict=True)
            ],
            "start_s": marked["start_s"].astype(float).to_numpy(),
            "end_s": marked["start_s"].astype(float).to_numpy(),
        }
    )


def _marker(panel: _Panel, x: float, stall: float, target: str, top: float) -> list[str]:
    """A resize's stall as a bar, a dotted line where it took effect, and its target (last)."""
    out = []
    if stall > 0:
        y = float(panel.y(min(stall, top)))
        out.append(
            f'<rect x="{x - 3:.1f}" y="{y:.1f}" width="6" '
            f'height="{panel.top + panel.height - y:.1f}" fill="{CRITICAL_COLOR}" '
            'fill-opacity="0.5"/>'
        )
    out.append(
        f'<line x1="{x:.1f}" y1="{panel.top:.1f}" x2="{x:.1f}" '
        f'y2="{panel.top + panel.height:.1f}" stroke="{RESIZE_COLOR}" '
        'stroke-dasharray="2,3"/>'
    )
    out.append(
        f'<text x="{x + 2:.1f}" y="{panel.top + 26:.1f}" font-size="9" '
        f'fill="{RESIZE_COLOR}">→{escape(target)}</text>'
    )
    return out


def _resize_markers(panel: _Panel, spans: pd.DataFrame, top: float) -> list[str]:
    """A marker before the step each resize took effect at."""
    out = []
    for row in spans.itertuples(index=False):
        x = float(panel.x(row.effective_step - 0.5))
        out += _marker(panel, x, float(row.end_s - row.start_s), str(row.to_allocation), top)
    return out


LABEL_GAP_PX = 48
"""Least distance between two resize labels of a long run's picture."""


def _column_markers(panel: _Panel, spans: pd.DataFrame, top: float) -> list[str]:
    """The resize markers of a run of more steps than pixel columns: one per column holding
    resizes, with the longest stall among them and the last one's target, labels kept apart."""
    if not len(spans):
        return []
    ordered = spans.sort_values("effective_step", kind="stable")
    columns = column_of(
        panel.x(ordered["effective_step"].to_numpy(float) - 0.5),
        left=panel.left,
        width=int(panel.width),
    )
    stall = (ordered["end_s"] - ordered["start_s"]).to_numpy(float)
    starts = np.flatnonzero(np.r_[True, columns[1:] != columns[:-1]])
    longest = np.maximum.reduceat(stall, starts).tolist()
    targets = ordered["to_allocation"].to_numpy(object)[np.r_[starts[1:], len(columns)] - 1]
    out: list[str] = []
    labelled = -np.inf
    for column, stall_s, target in zip(columns[starts].tolist(), longest, targets, strict=True):
        x = panel.left + column + 0.5
        marker = _marker(panel, x, stall_s, str(target), top)
        if x - labelled < LABEL_GAP_PX:
            marker = marker[:-1]  # its label: too close to the last one shown
        else:
            labelled = x
        out += marker
    return out


def _line_points(panel: _Panel, k: np.ndarray, values: np.ndarray, long: bool) -> str:
    """A line's points: every one, or for a long run each pixel column's envelope."""
    if long:
        picked = column_envelope(
            column_of(panel.x(k), left=panel.left, width=int(panel.width)), values
        )
        k, values = k[picked], values[picked]
    return _points(panel.x(k), panel.y(values))


def _step_panel(steps: pd.DataFrame, spans: pd.DataFrame) -> list[str]:
    k = steps["step"].to_numpy(float)
    series = [steps[c].to_numpy(float) for c in ("step_s", "rollout_s", "train_s")]
    top = max(float(np.nanmax(np.concatenate(series))), 1e-9) * 1.1
    panel = _Panel(
        70, 60, WIDTH - 100, 300, (k.min() - 0.5, max(k.max() + 0.5, k.min() + 0.5)), (0.0, top)
    )
    out = _axes(panel, x_label="training step", y_label="time (s)", title="Step time per step")
    long = len(k) > panel.width
    out += _column_markers(panel, spans, top) if long else _resize_markers(panel, spans, top)
    styles = [("black", "1.6", ""), (ROLLOUT_COLOR, "1", "5,3"), (TRAIN_COLOR, "1", "5,3")]
    for values, (color, width, dash) in zip(series, styles, strict=True):
        out.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="{width}" '
            f'stroke-dasharray="{dash}" points="{_line_points(panel, k, values, long)}"/>'
        )
    out += _legend(
        panel,
        [
            ("step time", "black", ""),
            ("rollout stage", ROLLOUT_COLOR, "5,3"),
            ("train stage", TRAIN_COLOR, "5,3"),
            ("resize", RESIZE_COLOR, "2,3"),
        ],
    )
    return out


def _stalls(panel: _Panel, spans: pd.DataFrame) -> list[str]:
    """Every resize stall shaded over the run time it took."""
    out = []
    for row in spans.itertuples(index=False):
        if row.end_s > row.start_s:
            x0, x1 = float(panel.x(row.start_s)), float(panel.x(row.end_s))
            out.append(
                f'<rect x="{x0:.1f}" y="{panel.top:.1f}" width="{max(x1 - x0, 1):.1f}" '
                f'height="{panel.height:.1f}" fill="{CRITICAL_COLOR}" '
                'fill-opacity="0.25"/>'
            )
    return out


def _stall_columns(panel: _Panel, spans: pd.DataFrame) -> list[str]:
    """The pixel columns resize stalls touch, shaded a run of columns at a time."""
    stalled = spans[spans["end_s"] > spans["start_s"]]
    width = int(panel.width)
    first = column_of(panel.x(stalled["start_s"].to_numpy(float)), left=panel.left, width=width)
    last = column_of(panel.x(stalled["end_s"].to_numpy(float)), left=panel.left, width=width)
    return [
        f'<rect x="{panel.left + a:.1f}" y="{panel.top:.1f}" width="{b - a + 1:.1f}" '
        f'height="{panel.height:.1f}" fill="{CRITICAL_COLOR}" fill-opacity="0.25"/>'
        for a, b in columns_touched(first, last, width=width)
    ]


def _allocation_panel(steps: pd.DataFrame, spans: pd.DataFrame) -> list[str]:
    start = steps["start_s"].to_numpy(float)
    end = steps["end_s"].to_numpy(float)
    train = steps["train_gpus"].to_numpy(float)
    rollout = steps["rollout_gpus"].to_numpy(float)
    total = float((train + rollout).max()) or 1.0
    panel = _Panel(
        70,
        440,
        WIDTH - 100,
        160,
        (float(start.min()), max(float(end.max()), float(start.min()) + 1e-9)),
        (0.0, total * 1.15),
    )
    out = _axes(
        panel,
        x_label="run time (s)",
        y_label="GPUs",
        title="Allocation over time (train + rollout GPUs)",
    )
    long = len(start) > panel.width
    if long:  # the split each pixel column ends on
        start, held = columns_held(start, float(end[-1]), width=int(panel.width))
        train, rollout, end = train[held], rollout[held], end[-1:]
    # Each step holds its split from its start to the next step's start (step="post").
    xs = np.repeat(np.append(start, end[-1]), 2)[1:-1]
    for low, high, color in (
        (0 * train, train, TRAIN_COLOR),
        (train, train + rollout, ROLLOUT_COLOR),
    ):
        upper = panel.y(np.repeat(high, 2))
        lower = panel.y(np.repeat(low, 2))[::-1]
        points = _points(
            np.concatenate([panel.x(xs), panel.x(xs[::-1])]), np.concatenate([upper, lower])
        )
        out.append(f'<polygon points="{points}" fill="{color}" fill-opacity="0.8"/>')
    out += _stall_columns(panel, spans) if len(spans) > panel.width else _stalls(panel, spans)
    out += _legend(
        panel,
        [
            ("training GPUs", TRAIN_COLOR, ""),
            ("rollout GPUs", ROLLOUT_COLOR, ""),
            ("resize stall", CRITICAL_COLOR, ""),
        ],
    )
    return out


def timeline_svg(steps: pd.DataFrame, resizes: pd.DataFrame | None = None, *, title: str) -> str:
    """The SVG text of the timeline of a run given by its trace-schema tables."""
    if steps.empty:
        raise ValueError("steps is empty: nothing to draw")
    ordered = steps.sort_values("step", kind="stable")
    spans = _resize_spans(ordered, resizes)
    body = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="24" text-anchor="middle" font-size="15">{escape(title)}</text>',
        *_step_panel(ordered, spans),
        *_allocation_panel(ordered, spans),
        "</svg>",
    ]
    return "\n".join(body) + "\n"


def write_timeline_svg(
    path: str | Path, steps: pd.DataFrame, resizes: pd.DataFrame | None = None, *, title: str
) -> Path:
    """Write `timeline_svg` to `path` (a run folder's timeline.svg)."""
    target = Path(path)
    target.write_text(timeline_svg(steps, resizes, title=title), encoding="utf-8")
    return target
