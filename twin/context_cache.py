"""The last few contexts of generated workloads, kept per process.

Comparing policies, or one policy's parameter values, on one scenario (a notebook that tries
cooldowns one `simulate()` after the other) asks for the same workload and the same stage times
each time. A context is a pure function of the scenario's config, its cost models and its seed
(the synthetic generator draws the same workload from the same seed), so it is kept under a
digest of those and handed out again instead of drawing the workload and running the rollout
kernel once more.

Only contexts of generated workloads are kept: a workload passed in (a replayed trace) would
have to be hashed whole to be recognised. Its arrays are made read-only, so that no caller can
change what later calls are given. Small runs only (`MAX_CACHED_SAMPLES`): a long run's context
is built once anyway, and keeping it would hold its memory after the run. DYNARESIZE_NO_CONTEXT_
CACHE=1 turns the cache off; `clear_context_cache()` empties it.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from typing import Any

import numpy as np

__all__ = [
    "MAX_CACHED_CONTEXTS",
    "MAX_CACHED_SAMPLES",
    "NO_CONTEXT_CACHE_ENV",
    "cache_get",
    "cache_put",
    "clear_context_cache",
    "context_key",
]

NO_CONTEXT_CACHE_ENV = "DYNARESIZE_NO_CONTEXT_CACHE"
MAX_CACHED_CONTEXTS = 4
"""Contexts kept at most; the least recently used goes first."""
MAX_CACHED_SAMPLES = 1_000_000
"""Largest workload (samples over all steps) whose context is kept: about 20 MB of arrays."""

_cache: OrderedDict[str, Any] = OrderedDict()


def context_key(config_json: str, costs_json: str, seed: int) -> str | None:
    """The digest a context of a generated workload is kept under; None when the cache is off."""
    if os.environ.get(NO_CONTEXT_CACHE_ENV, "").strip() not in ("", "0"):
        return None
    digest = hashlib.blake2b(digest_size=16)
    for part in (config_json, costs_json, str(seed)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def cache_get(key: str | None) -> Any:
    """The context kept under `key`, or None."""
    if key is None:
        return None
    found = _cache.get(key)
    if found is not None:
        _cache.move_to_end(key)
    return found


def cache_put(key: str | None, context: Any, num_samples: int) -> None:
    """Keep `context` under `key` (a small one only), its arrays made read-only."""
    if key is None or num_samples > MAX_CACHED_SAMPLES:
        return
    for array in _arrays(context, depth=3):
        array.flags.writeable = False
    _cache[key] = context
    _cache.move_to_end(key)
    while len(_cache) > MAX_CACHED_CONTEXTS:
        _cache.popitem(last=False)


def clear_context_cache() -> None:
    """Forget every kept context (a benchmark timing the cold build calls it)."""
    _cache.clear()


def _arrays(value: Any, depth: int) -> Iterator[np.ndarray]:
    """The numpy arrays among a dataclass's fields, and its dataclass fields', `depth` deep."""
    if isinstance(value, np.ndarray):
        yield value
    elif depth > 0 and is_dataclass(value) and not isinstance(value, type):
        for field in fields(value):
            yield from _arrays(getattr(value, field.name), depth - 1)
