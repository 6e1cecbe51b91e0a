"""Numbers the cost models can compute with, checked where a config or cost file is read.

The cost models multiply and divide their inputs (per-token seconds times tokens, gigabytes over
bandwidths times efficiencies). A value such as 1e308 or a denormal bandwidth (5e-324) passes a
`> 0` check yet turns a stage time into infinity several steps later, where the error can only
blame a derived figure. Bounding each input's magnitude keeps every product and quotient finite,
and a refusal names the input field itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

MAX_MAGNITUDE = 1e12
"""Largest magnitude of any number in cluster, model or cost parameters (seconds, GB, GB/s,
tokens): far beyond any real setting, small enough that products of a few stay finite."""

MIN_DIVISOR = 1e-6
"""Smallest nonzero bandwidth (GB/s, i.e. 1 KB/s) or efficiency the models divide by."""


def describe_number(value: float | int) -> str:
    """A figure for a message: 3 significant digits, and integers too large for a float
    written as a power of ten (10**400 is `about 1e400`)."""
    if isinstance(value, int) and abs(value) >= 10**15:
        digits = len(str(abs(value))) - 1
        return f"{'-' if value < 0 else ''}about 1e{digits}"
    return f"{float(value):.3g}"


def _is_divisor(path: str) -> bool:
    leaf = path.rsplit(".", 1)[-1]
    return leaf.endswith("_gbps") or "efficiency" in leaf


def _numbers(value: Any, path: str) -> Iterator[tuple[str, float | int]]:
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _numbers(getattr(value, name), f"{path}.{name}" if path else name)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _numbers(item, f"{path}.{i}" if path else str(i))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield path, value


def out_of_range(model: BaseModel, *, prefix: str = "") -> str | None:
    """The first number of `model` (and what it holds) outside the range the models compute
    with, as a message naming its dotted field path under `prefix`; None if all are fine."""
    for path, value in _numbers(model, prefix):
        if isinstance(value, float) and not math.isfinite(value):
            return f"{path} must be a finite number, got {value}"
        if abs(value) > MAX_MAGNITUDE:
            return (
                f"{path} is {describe_number(value)}, beyond what the twin computes with "
                f"(at most {MAX_MAGNITUDE:.0e} in magnitude)"
            )
        if _is_divisor(path) and 0 < abs(value) < MIN_DIVISOR:
            return (
                f"{path} is {describe_number(value)}, too small to divide by "
                f"(at least {MIN_DIVISOR:.0e}, or a realistic value)"
            )
    return None
