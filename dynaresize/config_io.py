"""Reading a user's YAML and reporting what is wrong with it: the leaf every package may import.

The twin, the executor and the command line all read YAML written by people, and all must answer
a mistake the same way: one `ConfigError` line naming the file, the line or the field. This
module imports nothing of the project, so importing it never drags in the twin, Ray or torch.

What the loader refuses, and why:
- anchors and aliases: a few hundred bytes of nested aliases expand to gigabytes once a config
  is dumped back out (config.json beside every result), and no config of ours needs them;
- duplicate keys: YAML keeps the last silently, so a user's first value would vanish unseen;
- nesting deeper than `MAX_YAML_DEPTH`: PyYAML composes recursively, so a deep file would end in
  a RecursionError instead of an answer;
- bytes that are not UTF-8 text (a binary file, UTF-16).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import AliasChoices, BaseModel, ValidationError

__all__ = [
    "MAX_YAML_DEPTH",
    "ConfigError",
    "deep_merge",
    "format_validation_error",
    "load_yaml_mapping",
    "parse_yaml_mapping",
    "refuse_two_names",
]

MAX_YAML_DEPTH = 64
"""Deepest nesting of mappings and sequences a config may have (ours need fewer than ten)."""


class ConfigError(ValueError):
    """A user's input is wrong. The message names the file and the field (or line)."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader without aliases, duplicate keys or unbounded nesting."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(event.start_mark, "YAML aliases (*name) are not accepted")
        event = self.peek_event()
        if getattr(event, "anchor", None) is not None:
            raise _Refused(event.start_mark, "YAML anchors (&name) are not accepted")
        nests = isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent)
        if nests:
            self._depth += 1
            if self._depth > MAX_YAML_DEPTH:
                raise _Refused(event.start_mark, f"nested deeper than {MAX_YAML_DEPTH} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            if nests:
                self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, list | dict):
                raise _Refused(key_node.start_mark, "a mapping key must be a plain value")
            if key in seen:
                raise _Refused(key_node.start_mark, f"duplicate key {key!r}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _StrictLoader.construct_mapping
)


class _Refused(Exception):
    def __init__(self, mark: Any, problem: str) -> None:
        super().__init__(problem)
        self.mark, self.problem = mark, problem


def _where(mark: Any) -> str:
    return f" line {mark.line + 1}, column {mark.column + 1}:" if mark is not None else ""


def parse_yaml_mapping(text: str, *, source: str) -> dict[str, Any]:
    """Parse YAML text that must hold a mapping; each failure is one ConfigError naming `source`."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except _Refused as err:
        raise ConfigError(f"{source}:{_where(err.mark)} {err.problem}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{source}:{_where(mark)} invalid YAML: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply to read") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of fields, got {type(data).__name__}")
    return data


def load_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """Read a YAML file that must hold a mapping; every failure is a ConfigError naming the file."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a YAML file")
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read ({err.strerror or err})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {err.start} is {raw[err.start]:#04x}); "
            "save the file as UTF-8"
        ) from None
    if "\x00" in text:
        raise ConfigError(f"{path}: holds NUL bytes; not a YAML text file")
    return parse_yaml_mapping(text, source=str(path))


def format_validation_error(err: ValidationError, source: str | None = None) -> str:
    """One line naming the file (where known) and, per problem, the dotted field path."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e.get("loc", ()))
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return (f"{source}: " if source else "") + "; ".join(parts)


def refuse_two_names(model: type[BaseModel], data: Any) -> None:
    """Raise ValueError when `data` (the raw mapping of a `model`) gives one field under two of
    its names: the current one (first of its `AliasChoices`) and an old one still read.

    Without it pydantic takes one name and calls the other an extra input, which hides that
    the user wrote the same setting twice, perhaps with two different values."""
    if not isinstance(data, dict):
        return
    for name, info in model.model_fields.items():
        choices = info.validation_alias
        if not isinstance(choices, AliasChoices):
            continue
        names = [c for c in choices.choices if isinstance(c, str)] or [name]
        given = [n for n in names if n in data]
        if len(given) > 1:
            current = names[0]
            old = ", ".join(n for n in given if n != current)
            raise ValueError(
                f"{' and '.join(given)} are both given: {old} is the old name of {current}; "
                f"keep only {current}"
            )


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` applied key by key, recursing into mappings both sides hold."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out
