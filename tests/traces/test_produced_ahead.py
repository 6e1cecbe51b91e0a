"""Items produced on a thread ahead of their consumer: the same items in order, the producer's
error raised in the consumer, and no thread left behind when the consumer stops early."""

from __future__ import annotations

import threading

import pytest

from dynaresize.traces.produced_ahead import produced_ahead


def _threads() -> int:
    return sum(t.name == "produced-ahead" for t in threading.enumerate())


def test_the_same_items_in_order():
    assert list(produced_ahead(range(1000), depth=3)) == list(range(1000))
    assert list(produced_ahead([])) == []
    assert _threads() == 0


def test_the_producers_error_is_raised_where_its_item_would_come():
    def failing():
        yield 1
        yield 2
        raise OSError(28, "No space left on device")

    got = []
    with pytest.raises(OSError, match="No space"):
        for item in produced_ahead(failing()):
            got.append(item)
    assert got == [1, 2] and _threads() == 0


def test_a_consumer_that_stops_early_stops_the_producer():
    produced = []

    def endless():
        n = 0
        while True:
            produced.append(n)
            yield n
            n += 1

    items = produced_ahead(endless(), depth=2)
    assert [next(items) for _ in range(5)] == list(range(5))
    items.close()
    assert _threads() == 0
    assert len(produced) <= 5 + 3  # at most depth items (and the one in hand) ahead
