"""Pydantic instances from values the code computed itself, without validating them again.

The twin's pipeline builds an observation, its stage times and one prediction per candidate at
every step boundary, and a policy answers each with a decision; validating values the code
produced itself would only re-check its own arithmetic, at a cost that shows in a sweep of
thousands of runs. Only for such values: anything that comes from a user goes through the
models' validation.
"""

from __future__ import annotations

_NUM_FIELDS: dict[type, int] = {}
_new = object.__new__
_set = object.__setattr__


def trusted(cls, **values):
    """An instance of a pydantic model from values the pipeline computed itself.

    Does what `model_construct` does (no validation; fields not given take their defaults) at
    half its cost: observations are built at every step boundary, and validating numbers the
    twin produced would only re-check its own arithmetic. A test checks that the observations
    built so equal validated ones (tests/twin/test_twin_simulate.py).
    """
    num_fields = _NUM_FIELDS.get(cls)
    if num_fields is None:
        num_fields = _NUM_FIELDS[cls] = len(cls.model_fields)
    if len(values) != num_fields:  # a field added to the contract later gets its default
        for name, info in cls.model_fields.items():
            if name not in values:
                values[name] = info.get_default(call_default_factory=True)
    return trusted_complete(cls, values)


def trusted_complete(cls, values: dict, fields_set: set[str] | None = None):
    """`trusted` for a dict that already holds every field of `cls` (the hot path).

    `fields_set`: the fields a validated instance would count as given (`model_fields_set`),
    where the defaults among `values` were not; all of them by default. A caller may hand the
    same set to many instances of a frozen model: nothing changes it in place (`model_copy`
    copies it first)."""
    obj = _new(cls)
    _set(obj, "__dict__", values)
    _set(obj, "__pydantic_fields_set__", set(values) if fields_set is None else fields_set)
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj
