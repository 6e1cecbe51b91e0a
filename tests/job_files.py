"""Writers of small dataset files in veRL's format, for the tests of `executor.job`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def verl_row(
    content: str | list[dict[str, Any]], *, answer: Any = "42", source: str = "test", **extra: Any
) -> dict[str, Any]:
    """One row: a chat prompt (a string becomes one user message), the ground truth `answer`."""
    messages = [{"role": "user", "content": content}] if isinstance(content, str) else content
    return {
        "data_source": source,
        "prompt": messages,
        "ability": "test",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"index": 0, **extra},
    }


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path
