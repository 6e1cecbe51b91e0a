"""Pydantic instances from values the code computed itself, without validating them again.

The twin's pipeline builds an observation, its stage times and one prediction per candidate at
every step boundary, and a policy answers each with a decision; validating values the code
produced itself would only re-check its own arithmetic, at a cost that shows in a sweep of
thousands of runs. Only for such values: anything that comes from a user goes through the
models' validation.
"""

from __future__ import annotations

from pydantic import BaseModel

_NUM_FIELDS: dict[type, int] = {}
_new = object.__new__

# The setters of the four slots every pydantic instance has, taken from BaseModel once:
# calling a slot's descriptor directly skips the attribute look-up through the class's MRO
# that `object.__setattr__(obj, name, value)` makes (a third of an instance's cost here).
_SLOTS = vars(BaseModel)
set_dict = _SLOTS["__dict__"].__set__
set_fields_set = _SLOTS["__pydantic_fields_set__"].__set__
set_extra = _SLOTS["__pydantic_extra__"].__set__
set_private = _SLOTS["__pydantic_private__"].__set__


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
    set_dict(obj, values)
    set_fields_set(obj, set(values) if fields_set is None else fields_set)
    set_extra(obj, None)
    set_private(obj, None)
    return obj
