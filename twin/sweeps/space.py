"""What a sweep varies: parameters named by dotted path, expanded as a grid or a random sample.

A parameter is written `path=v1,v2,v3` (a list of values) or, for random samples only,
`path=lo..hi` (a range: integers if both ends are integers, else uniform floats). The path names
any field of the scenario config (`costs.rollout.decode_step_base_s`, `simulation.num_steps`,
`policies.0.cooldown_steps`); `policy.FIELD` sets FIELD on every configured policy that has it, so
`policy.cooldown_steps=5,10,20` sweeps the hysteresis controller without naming its index (a
policy without the field runs at its own settings, as a reference: `policies_without_fields`).
Overrides are applied to the config's plain-data form and the result is validated again, so a
swept value is checked exactly as the same value in a YAML file would be.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import ValidationError

from dynaresize.config_io import ConfigError, format_validation_error

from ..config import ScenarioConfig

POLICY_PREFIX = "policy."
RANGE_SEPARATOR = ".."

Scalar = int | float | bool | str


def parse_scalar(text: str) -> Scalar:
    """`5` -> 5, `0.2` -> 0.2, `true` -> True, anything else stays text (`6:2`, `overlapped`).

    Deliberately not YAML: YAML 1.1 would read `6:2` as the base-60 number 362.
    """
    stripped = text.strip()
    lowered = stripped.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for convert in (int, float):
        try:
            value = convert(stripped)
        except ValueError:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"sweep value {text!r} is not a finite number")
        return value
    return stripped


@dataclass(frozen=True)
class SweepParam:
    """One swept field: its dotted path and either a list of values or a sampling range."""

    path: str
    values: tuple[Scalar, ...] = ()
    low: float | None = None
    high: float | None = None

    @property
    def is_range(self) -> bool:
        return self.low is not None

    def sample(self, rng: np.random.Generator) -> Scalar:
        if not self.is_range:
            return self.values[int(rng.integers(len(self.values)))]
        assert self.low is not None and self.high is not None
        if isinstance(self.low, int) and isinstance(self.high, int):
            return int(rng.integers(self.low, self.high + 1))
        return float(rng.uniform(self.low, self.high))


def parse_param(text: str) -> SweepParam:
    """Parse `path=v1,v2` or `path=lo..hi`; raises ConfigError naming the text."""
    path, sep, raw = str(text).partition("=")
    path = path.strip()
    if not sep or not path or not raw.strip():
        raise ConfigError(
            f"sweep parameter {text!r} is not of the form PATH=V1,V2,... or PATH=LOW..HIGH"
        )
    if any(not part for part in path.split(".")):
        raise ConfigError(f"sweep parameter {text!r}: {path!r} is not a dotted path")
    if RANGE_SEPARATOR in raw:
        lo_text, _, hi_text = raw.partition(RANGE_SEPARATOR)
        lo, hi = parse_scalar(lo_text), parse_scalar(hi_text)
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (lo, hi))
        if not numbers or hi < lo:  # type: ignore[operator]
            raise ConfigError(
                f"sweep parameter {text!r}: a range needs numbers LOW..HIGH with LOW <= HIGH"
            )
        return SweepParam(path=path, low=lo, high=hi)  # type: ignore[arg-type]
    values = tuple(parse_scalar(v) for v in raw.split(","))
    if any(v == "" for v in values):
        raise ConfigError(f"sweep parameter {text!r} has an empty value")
    if len(set(map(repr, values))) != len(values):
        raise ConfigError(f"sweep parameter {text!r} lists a value twice")
    return SweepParam(path=path, values=values)


def check_unique_paths(params: list[SweepParam]) -> None:
    seen: set[str] = set()
    for p in params:
        if p.path in seen:
            raise ConfigError(f"sweep parameter {p.path!r} is given more than once")
        seen.add(p.path)


def grid_points(params: list[SweepParam]) -> list[dict[str, Scalar]]:
    """Every combination, the last parameter varying fastest (itertools.product order)."""
    check_unique_paths(params)
    ranged = [p.path for p in params if p.is_range]
    if ranged:
        raise ConfigError(
            f"sweep parameter(s) {', '.join(ranged)} give a range LOW..HIGH; a grid needs "
            "listed values (ranges are for random samples)"
        )
    if not params:
        return [{}]
    combos = itertools.product(*(p.values for p in params))
    return [dict(zip((p.path for p in params), combo, strict=True)) for combo in combos]


def random_points(
    params: list[SweepParam], *, num_samples: int, sample_seed: int
) -> list[dict[str, Scalar]]:
    """`num_samples` points, each parameter drawn independently; the same seed, the same points."""
    check_unique_paths(params)
    if num_samples < 1:
        raise ConfigError(f"a random sweep needs at least one sample, got {num_samples}")
    rng = np.random.default_rng(sample_seed)
    return [{p.path: p.sample(rng) for p in params} for _ in range(num_samples)]


def _policy_field_names(policy: dict[str, Any]) -> set[str]:
    from dynaresize.policies.registry import POLICY_CONFIG_CLASSES

    cls = POLICY_CONFIG_CLASSES.get(str(policy.get("kind")))
    return set(cls.model_fields) if cls is not None else set()


def policies_with_fields(config: ScenarioConfig, paths: list[str]) -> list[int]:
    """Indices of the configured policies that declare every `policy.FIELD` being swept.

    If no policy has the knob, the sweep is an error rather than a silent no-op; the policies
    that lack it are `policies_without_fields`.
    """
    fields = _swept_policy_fields(paths)
    policies = [p.model_dump(mode="json") for p in config.policies]
    if not policies:
        raise ConfigError("the scenario config lists no policies to sweep (policies: [...])")
    chosen = [i for i, p in enumerate(policies) if set(fields) <= _policy_field_names(p)]
    if not chosen:
        kinds = ", ".join(str(p.get("kind")) for p in policies)
        raise ConfigError(
            f"no configured policy ({kinds}) has the field(s) "
            f"{', '.join(fields)} named by the sweep parameters"
        )
    return chosen


@dataclass(frozen=True)
class UnsweptPolicy:
    """A configured policy that lacks some swept `policy.FIELD`: it cannot take those values,
    so the sweep runs it at its own settings instead, as a reference."""

    index: int
    kind: str
    missing_fields: tuple[str, ...]

    def note(self) -> str:
        return (
            f"{self.kind} (policies.{self.index}) has no {', '.join(self.missing_fields)}: it "
            "runs at its own settings, once per workload, seed and value of the other "
            "parameters, with those columns empty"
        )


def policies_without_fields(config: ScenarioConfig, paths: list[str]) -> list[UnsweptPolicy]:
    """The configured policies that lack at least one swept `policy.FIELD`, and which."""
    fields = _swept_policy_fields(paths)
    unswept = []
    for i, policy in enumerate(config.policies):
        data = policy.model_dump(mode="json")
        missing = tuple(f for f in fields if f not in _policy_field_names(data))
        if missing:
            unswept.append(UnsweptPolicy(i, str(data.get("kind")), missing))
    return unswept


def _swept_policy_fields(paths: list[str]) -> list[str]:
    return [p[len(POLICY_PREFIX) :] for p in paths if p.startswith(POLICY_PREFIX)]


def _set_path(data: dict[str, Any], path: str, value: Scalar) -> None:
    node: Any = data
    parts = path.split(".")
    walked: list[str] = []
    for part in parts[:-1]:
        node = _child(node, part, walked, path)
        walked.append(part)
    last = parts[-1]
    if isinstance(node, list):
        index = _list_index(node, last, walked, path)
        node[index] = value
    elif isinstance(node, dict):
        if last not in node:
            where = ".".join(walked) or "the config"
            raise ConfigError(f"sweep parameter {path!r}: {where} has no field {last!r}")
        node[last] = value
    else:
        raise ConfigError(f"sweep parameter {path!r}: {'.'.join(walked)} is not a section")


def _child(node: Any, part: str, walked: list[str], path: str) -> Any:
    if isinstance(node, list):
        return node[_list_index(node, part, walked, path)]
    if isinstance(node, dict) and part in node and isinstance(node[part], (dict, list)):
        return node[part]
    where = ".".join(walked) or "the config"
    if isinstance(node, dict) and part in node:
        raise ConfigError(f"sweep parameter {path!r}: {where}.{part} is a value, not a section")
    raise ConfigError(f"sweep parameter {path!r}: {where} has no section {part!r}")


def _list_index(node: list, part: str, walked: list[str], path: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(
            f"sweep parameter {path!r}: {'.'.join(walked)} is a list of {len(node)}; "
            f"{part!r} is not an index into it"
        )
    return int(part)


def apply_overrides(
    config: ScenarioConfig, overrides: dict[str, Scalar], *, policy_index: int | None = None
) -> ScenarioConfig:
    """The config with each dotted path set to its value, validated again.

    `policy.FIELD` paths go to policy `policy_index` (they need one). Raises ConfigError naming the
    parameter when a path does not exist or a value is invalid.
    """
    data = config.model_dump(mode="json")
    for path, value in overrides.items():
        if path.startswith(POLICY_PREFIX):
            if policy_index is None:
                raise ConfigError(f"sweep parameter {path!r} needs a policy to apply to")
            _set_path(data, f"policies.{policy_index}.{path[len(POLICY_PREFIX) :]}", value)
        else:
            _set_path(data, path, value)
    try:
        return type(config).model_validate(data)
    except ValidationError as err:
        shown = ", ".join(f"{k}={v}" for k, v in overrides.items())
        raise ConfigError(format_validation_error(err, f"sweep point {shown}")) from None


def split_point(point: dict[str, Scalar]) -> tuple[dict[str, Scalar], dict[str, Scalar]]:
    """(config overrides, policy overrides): `policy.FIELD` entries go to the second, keyed by
    FIELD, so a sweep over policy knobs only validates the config once per config part."""
    config_part = {k: v for k, v in point.items() if not k.startswith(POLICY_PREFIX)}
    policy_part = {
        k[len(POLICY_PREFIX) :]: v for k, v in point.items() if k.startswith(POLICY_PREFIX)
    }
    return config_part, policy_part


def override_policy(policy: Any, fields: dict[str, Scalar], *, point: dict[str, Scalar]) -> Any:
    """The policy config with `fields` set, validated as the policy's own config class."""
    from dynaresize.policies.registry import parse_policy_config

    if not fields:
        return policy
    data = {**policy.model_dump(mode="json"), **fields}
    try:
        return parse_policy_config(data)
    except ValidationError as err:
        shown = ", ".join(f"{k}={v}" for k, v in point.items())
        raise ConfigError(format_validation_error(err, f"sweep point {shown}")) from None
