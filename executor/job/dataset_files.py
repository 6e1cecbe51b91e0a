"""Read prompt rows in veRL's dataset format from Parquet and JSON Lines files, and check them.

A row holds `data_source` (a string naming where the prompt comes from; the reward receives it),
the prompt under the configured key (a list of chat messages `{role, content}` or a plain
string), `reward_model: {style, ground_truth}` (the ground truth goes to the reward) and an
optional `extra_info` mapping passed through to the reward untouched. Other fields (veRL's
`ability`, for instance) are allowed and ignored.

Every problem is one `DatasetError` naming the file, the row and the field, raised before
anything starts. Rows are numbered as each format's tools number them: a Parquet row by its
0-based index (`pandas.read_parquet(f).iloc[17]`), a JSONL row by its 1-based line (`sed -n 18p`).
Nothing here needs a tokenizer or torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynaresize.config_io import ConfigError

from .config import DataConfig

ChatMessages = tuple[dict[str, Any], ...]


class DatasetError(ConfigError):
    """A dataset file is missing, unreadable, or a row does not have the expected fields."""


@dataclass(frozen=True)
class RowPlace:
    """Where a row comes from, for error messages and the records."""

    file: str
    row: int
    """0-based row index in a Parquet file; 1-based line number in a JSONL file."""
    is_line: bool = False

    def __str__(self) -> str:
        return f"{self.file}: {'line' if self.is_line else 'row'} {self.row}"


@dataclass(frozen=True, eq=False)
class DataRow:
    """One checked row: what rendering needs, and what the reward receives."""

    place: RowPlace
    data_source: str
    prompt: str | ChatMessages
    ground_truth: Any
    reward_style: str | None
    extra_info: dict[str, Any] | None

    @property
    def is_chat(self) -> bool:
        return not isinstance(self.prompt, str)


def read_rows(config: DataConfig) -> list[DataRow]:
    """Every row of `config.train_files`, in file order, checked; at most `config.max_rows`."""
    rows: list[DataRow] = []
    for name in config.train_files:
        limit = None if config.max_rows is None else config.max_rows - len(rows)
        if limit == 0:
            break
        rows.extend(read_file(Path(name), prompt_key=config.prompt_key, max_rows=limit))
    return rows


def read_file(path: Path, *, prompt_key: str, max_rows: int | None = None) -> list[DataRow]:
    """The checked rows of one Parquet or JSONL file."""
    if not path.exists():
        raise DatasetError(f"data.train_files: {path}: no such file")
    if not path.is_file():
        raise DatasetError(f"data.train_files: {path}: not a file")
    if path.stat().st_size == 0:
        raise DatasetError(f"data.train_files: {path}: the file is empty")
    records = _parquet_records(path) if path.suffix.lower() == ".parquet" else _jsonl_records(path)
    rows: list[DataRow] = []
    for place, record in records:
        if max_rows is not None and len(rows) == max_rows:
            break
        rows.append(check_row(record, place=place, prompt_key=prompt_key))
    if not rows:
        raise DatasetError(f"data.train_files: {path}: the file has no rows")
    return rows


def _parquet_records(path: Path) -> Iterator[tuple[RowPlace, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise DatasetError(
            f"data.train_files: {path}: not a readable Parquet file ({err})"
        ) from None
    for index, record in enumerate(table.to_pylist()):
        yield RowPlace(str(path), index), record


def _jsonl_records(path: Path) -> Iterator[tuple[RowPlace, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DatasetError(f"data.train_files: {path}: not UTF-8 text ({err.reason})") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        place = RowPlace(str(path), number, is_line=True)
        try:
            yield place, json.loads(line)
        except json.JSONDecodeError as err:
            raise DatasetError(f"{place}: not valid JSON ({err.msg}, column {err.colno})") from None


def check_row(record: Any, *, place: RowPlace, prompt_key: str) -> DataRow:
    """A `DataRow` from one decoded record, or a `DatasetError` naming the first bad field."""
    if not isinstance(record, Mapping):
        raise DatasetError(f"{place}: expected an object with fields, got {_kind(record)}")
    if prompt_key not in record:
        fields = ", ".join(sorted(str(k) for k in record)) or "none"
        raise DatasetError(f"{place}: no field {prompt_key!r} (data.prompt_key); fields: {fields}")
    data_source = _field(record, "data_source", place)
    if not isinstance(data_source, str):
        raise DatasetError(f"{place}: data_source: expected a string, got {_kind(data_source)}")
    reward_model = _field(record, "reward_model", place)
    if not isinstance(reward_model, Mapping) or "ground_truth" not in reward_model:
        raise DatasetError(
            f"{place}: reward_model: expected a mapping with a ground_truth, got "
            f"{_kind(reward_model)}"
        )
    style = reward_model.get("style")
    if style is not None and not isinstance(style, str):
        raise DatasetError(f"{place}: reward_model.style: expected a string, got {_kind(style)}")
    extra_info = record.get("extra_info")
    if extra_info is not None and not isinstance(extra_info, Mapping):
        raise DatasetError(f"{place}: extra_info: expected a mapping, got {_kind(extra_info)}")
    return DataRow(
        place=place,
        data_source=data_source,
        prompt=_check_prompt(record[prompt_key], place=place, key=prompt_key),
        ground_truth=_plain(reward_model["ground_truth"]),
        reward_style=style,
        extra_info=None if extra_info is None else dict(_plain(extra_info)),
    )


def _field(record: Mapping, name: str, place: RowPlace) -> Any:
    if name not in record:
        raise DatasetError(f"{place}: no field {name!r}")
    return record[name]


def _check_prompt(value: Any, *, place: RowPlace, key: str) -> str | ChatMessages:
    if isinstance(value, str):
        if not value:
            raise DatasetError(f"{place}: {key}: the prompt is an empty string")
        return value
    if not isinstance(value, list | tuple):
        raise DatasetError(
            f"{place}: {key}: expected a list of chat messages or a string, got {_kind(value)}"
        )
    if not value:
        raise DatasetError(f"{place}: {key}: the list of chat messages is empty")
    messages = []
    for index, message in enumerate(value):
        where = f"{place}: {key}[{index}]"
        if not isinstance(message, Mapping):
            raise DatasetError(
                f"{where}: expected a message {{role, content}}, got {_kind(message)}"
            )
        for name in ("role", "content"):
            if not isinstance(message.get(name), str):
                raise DatasetError(
                    f"{where}.{name}: expected a string, got {_kind(message.get(name))}"
                )
        messages.append({k: _plain(v) for k, v in message.items() if v is not None})
    return tuple(messages)


def _plain(value: Any) -> Any:
    """Plain Python values: numpy scalars and arrays (pandas-written Parquet) become numbers and
    lists, so a reward function sees the same types from Parquet and JSONL."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    tolist = getattr(value, "tolist", None)
    return _plain(tolist()) if callable(tolist) and not isinstance(value, str) else value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value[:30]!r})"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__
