"""Items of an iterator produced on a thread of their own, a few ahead of their consumer.

A writer that draws its rows (numpy) and encodes them (pyarrow) does two things that each let
go of the interpreter for most of their work: done one after the other they use one core,
overlapped they use two. The producing thread stops when the consumer does, whether it has
read every item, stopped early or failed, and an error of the producer is raised in the
consumer where the item it could not produce would have come.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["produced_ahead"]

T = TypeVar("T")

_WAIT_S = 0.05
"""How often a producer blocked on a full queue looks whether its consumer has stopped."""


def produced_ahead(items: Iterable[T], *, depth: int = 1) -> Iterator[T]:
    """`items`, in order, produced on a thread up to `depth` items ahead of the caller."""
    handoff: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                handoff.put(entry, timeout=_WAIT_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((False, item)):
                    return
        except BaseException as error:  # handed to the consumer, raised there
            put((True, error))
            return
        put((True, None))

    thread = threading.Thread(target=produce, name="produced-ahead", daemon=True)
    thread.start()
    try:
        while True:
            last, value = handoff.get()
            if last:
                if value is not None:
                    raise value
                return
            yield value
    finally:
        stop.set()
        thread.join()
