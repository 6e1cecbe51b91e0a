"""Where a sweep keeps finished work, so an interrupted or extended sweep redoes none of it.

Results are rows keyed by a hash of everything that determines them (the resolved config, the
policy, the workload, the seed and the costs). They are appended to `OUT/cache/` as small Parquet
part files while the sweep runs, flushed every few seconds, so a sweep stopped half way keeps what
it finished; the next sweep with an overlapping space reads the parts and skips those keys.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pandas as pd

CACHE_DIRNAME = "cache"
KEY_COLUMN = "key"


class ResultCache:
    """Finished rows of one kind (`runs` or `baselines`) under a sweep's output folder."""

    def __init__(self, out_dir: Path | None, kind: str, *, flush_every_s: float = 5.0) -> None:
        self.kind = kind
        self.directory = out_dir / CACHE_DIRNAME if out_dir is not None else None
        self.flush_every_s = flush_every_s
        self._pending: list[dict] = []
        self._last_flush = time.monotonic()
        self.rows: dict[str, dict] = self._load()
        self.written: list[Path] = []
        """Part files this cache wrote (a failed sweep takes them out again)."""

    def _load(self) -> dict[str, dict]:
        if self.directory is None or not self.directory.is_dir():
            return {}
        parts = sorted(self.directory.glob(f"{self.kind}-*.parquet"))
        rows: dict[str, dict] = {}
        for part in parts:
            for row in pd.read_parquet(part).to_dict(orient="records"):
                rows[str(row[KEY_COLUMN])] = row
        return rows

    def __contains__(self, key: object) -> bool:
        return key in self.rows

    def get(self, key: str) -> dict:
        return self.rows[key]

    def add(self, row: dict) -> None:
        """Keep a finished row; write it out when the last write is older than flush_every_s."""
        self.rows[str(row[KEY_COLUMN])] = row
        self._pending.append(row)
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if self.directory is None or not self._pending:
            self._pending.clear()
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"{self.kind}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.parquet"
        staging = self.directory / f".{name}.tmp"
        try:
            pd.DataFrame(self._pending).to_parquet(staging, index=False)
            staging.rename(self.directory / name)
        finally:
            staging.unlink(missing_ok=True)
        self.written.append(self.directory / name)
        self._pending.clear()

    def discard_written(self) -> None:
        """Remove the part files this cache wrote and forget their rows' place on disk."""
        for part in self.written:
            part.unlink(missing_ok=True)
        self.written.clear()
        self._pending.clear()
