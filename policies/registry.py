"""The registry of policies: a pydantic discriminated union on `kind`.

`PolicyConfig` validates a policy section of a YAML config (or a mapping), `build_policy` turns a
config into a fresh policy object, and `parse_policy_spec` reads the one-line form the CLI takes,
`kind:key=value,key=value`. Every kind appears once: a second config class claiming a kind already
taken is an error when this module is imported, never a silent override.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Union, get_args

from pydantic import BeforeValidator, ConfigDict, Field, TypeAdapter
from pydantic_core import PydanticCustomError

from .base import PolicyConfigBase
from .greedy import GreedyConfig
from .hpa import HpaConfig
from .hysteresis import HysteresisConfig
from .payback import PaybackConfig
from .scheduled import ScheduledConfig
from .static import StaticConfig
from .types import Policy
from .verl_drc import VerlDrcConfig
from .verl_switch import VerlSwitchConfig

PolicyConfig = Annotated[
    Union[  # noqa: UP007  (a runtime union object is what the discriminator needs on 3.10)
        StaticConfig,
        ScheduledConfig,
        GreedyConfig,
        HysteresisConfig,
        PaybackConfig,
        VerlSwitchConfig,
        VerlDrcConfig,
        HpaConfig,
    ],
    Field(discriminator="kind"),
]
"""Any policy config; its `kind` field picks the class."""


def _index_by_kind(
    classes: tuple[type[PolicyConfigBase], ...],
) -> dict[str, type[PolicyConfigBase]]:
    """Map kind -> config class, refusing two classes that claim the same kind."""
    index: dict[str, type[PolicyConfigBase]] = {}
    for cls in classes:
        kind = cls.model_fields["kind"].default
        if kind in index:
            raise ValueError(
                f"policy kind {kind!r} is claimed by both {index[kind].__name__} and {cls.__name__}"
            )
        index[kind] = cls
    return index


POLICY_CONFIG_CLASSES: dict[str, type[PolicyConfigBase]] = _index_by_kind(
    get_args(get_args(PolicyConfig)[0])
)
"""kind -> config class, in registration order."""

_CONFIG_ADAPTER: TypeAdapter[Any] = TypeAdapter(PolicyConfig, config=ConfigDict(title="policy"))


def policy_kinds() -> list[str]:
    """Every registered kind, in registration order."""
    return list(POLICY_CONFIG_CLASSES)


def parse_policy_config(data: Mapping[str, Any] | PolicyConfigBase) -> PolicyConfigBase:
    """Validate a mapping such as `{"kind": "hysteresis", "cooldown_steps": 5}` into a config.

    Raises pydantic's ValidationError (a ValueError) naming the kind and the field on bad input.
    """
    if isinstance(data, PolicyConfigBase):
        return data
    return _CONFIG_ADAPTER.validate_python(data)


def build_policy(cfg: PolicyConfigBase | Mapping[str, Any]) -> Policy:
    """A fresh policy object, in its initial state, for a config (or a mapping of one)."""
    return parse_policy_config(cfg).build()


def _spec_error(text: str, problem: str) -> PydanticCustomError:
    """A validation error whose message is the problem itself, without pydantic's prefix."""
    message = f"policy spec {text!r}: {problem}"
    return PydanticCustomError("policy_spec", "{message}", {"message": message})


def _spec_to_mapping(text: Any) -> Any:
    """`"hysteresis:cooldown_steps=5,up_threshold=0.2"` -> `{"kind": "hysteresis", ...}`.

    Values stay strings; the config's own validation converts and checks them, so the CLI and a
    YAML file report bad values in the same words.
    """
    if not isinstance(text, str):
        return text
    kind, _, rest = text.strip().partition(":")
    kind = kind.strip()
    if not kind:
        raise _spec_error(text, "no policy kind; expected KIND[:key=value,...]")
    if kind not in POLICY_CONFIG_CLASSES:
        known = ", ".join(POLICY_CONFIG_CLASSES)
        raise _spec_error(text, f"unknown policy kind {kind!r}; known kinds: {known}")
    mapping: dict[str, Any] = {"kind": kind}
    for item in (part.strip() for part in rest.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise _spec_error(text, f"{item!r} is not of the form key=value")
        if key in mapping:
            raise _spec_error(text, f"{key!r} is given more than once")
        mapping[key] = value.strip()
    return mapping


_SPEC_ADAPTER: TypeAdapter[Any] = TypeAdapter(
    Annotated[PolicyConfig, BeforeValidator(_spec_to_mapping)], config=ConfigDict(title="policy")
)


def parse_policy_spec(text: str) -> PolicyConfigBase:
    """Parse the CLI form `KIND[:key=value,...]`, e.g. `hysteresis:cooldown_steps=5`.

    Every problem (syntax, unknown kind, unknown or bad field) raises pydantic's ValidationError,
    a ValueError whose message names the field, which the CLI reports as one line and exit 2.
    """
    return _SPEC_ADAPTER.validate_python(text)
