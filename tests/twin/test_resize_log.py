"""The resize log lays out the same phase rows, value for value and dtype for dtype, as a list
of one tuple per phase row would give."""

from __future__ import annotations

import random

import pandas as pd

from dynaresize.twin.pipeline_core import RESIZE_FIELDS
from dynaresize.twin.resize_log import _DRAIN, ResizeLog

PLANS = {
    (0, 1): [("a", 0.0, 1.5, True, 10), ("b", 1.5, 2.25, False, 0)],
    (1, 0): [("c", 0.0, 0.1, True, 3)],
    (1, 2): [("a", 0.0, 0.3, True, 7), ("b", 0.3, 0.35, True, 1), ("d", 0.35, 9.0, False, 2)],
}


def test_the_columns_equal_the_rows_of_every_resize_drained_or_not():
    rng = random.Random(5)
    log, rows = ResizeLog(), []
    now = 0.0
    for k in range(200):
        pair = rng.choice(list(PLANS))
        drain = rng.choice([None, None, rng.random()])
        head = ("overlapped", f"{pair[0]}", f"{pair[1]}")
        log.add(k, pair, lambda p=pair, h=head: (PLANS[p], h), start_s=now, drain_s=drain)
        offset = now
        if drain is not None:
            rows.append((len(log) - 1, k, _DRAIN[0], *head, now, now + drain, True, 0))
            offset += drain
        for name, lo, hi, critical, nbytes in PLANS[pair]:
            rows.append((len(log) - 1, k, name, *head, offset + lo, offset + hi, critical, nbytes))
        now += rng.random() * 10
    expected = pd.DataFrame(rows, columns=list(RESIZE_FIELDS))
    got = pd.DataFrame(log.columns(RESIZE_FIELDS))
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert ResizeLog().columns(RESIZE_FIELDS) == {}
