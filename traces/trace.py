"""A trace in memory: a run's metadata and one DataFrame per record table.

Also what both on-disk formats share: which record type each table holds and how a JSONL line
tags it, a run's metadata checked as it is read, the column values as plain Python written out,
and the Arrow types a trace may hold (plain numbers, booleans, text, lists of text: nothing is
ever unpickled or evaluated).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa
from pydantic import BaseModel, ValidationError

from .errors import TraceError, first_validation_problem
from .schema import (
    DecisionRecord,
    ExtraMetricRecord,
    ResizePhaseRecord,
    RunMeta,
    SampleRecord,
    StepRecord,
)
from .validation import ColumnKind, SkippedRow, empty_frame, summarize_skipped, validate_frame
from .workload import Workload

if TYPE_CHECKING:
    from .kept_lengths import SampleLengths, StreamedSamples
from .workload_inference import infer_workload, inference_notes

TABLES: dict[str, type[BaseModel]] = {
    "steps": StepRecord,
    "resizes": ResizePhaseRecord,
    "decisions": DecisionRecord,
    "samples": SampleRecord,
    "extras": ExtraMetricRecord,
}
"""Table name -> record type; also the Parquet file stems."""

RECORD_TAGS: dict[str, str] = {
    "step": "steps",
    "resize": "resizes",
    "decision": "decisions",
    "sample": "samples",
    "extra": "extras",
}
"""JSONL `record` tag -> table name (`meta` is the run metadata)."""

TAG_OF_TABLE = {table: tag for tag, table in RECORD_TAGS.items()}
TAG_OF_MODEL = {model: TAG_OF_TABLE[table] for table, model in TABLES.items()}


@dataclass
class Trace:
    """One run: its metadata and one DataFrame per table, columns as in traces/schema.py."""

    meta: RunMeta = field(default_factory=RunMeta)
    steps: pd.DataFrame = field(default_factory=lambda: empty_frame(StepRecord))
    resizes: pd.DataFrame = field(default_factory=lambda: empty_frame(ResizePhaseRecord))
    decisions: pd.DataFrame = field(default_factory=lambda: empty_frame(DecisionRecord))
    samples: pd.DataFrame = field(default_factory=lambda: empty_frame(SampleRecord))
    extras: pd.DataFrame = field(default_factory=lambda: empty_frame(ExtraMetricRecord))
    skipped: list[SkippedRow] = field(default_factory=list)
    """Rows lenient reading dropped (empty after a strict read)."""
    sample_lengths: SampleLengths | StreamedSamples | None = None
    """The samples read straight into their lengths (`read_trace(..., samples_as_lengths=True)`,
    what a replay reads), or left in a clean file to be read a block at a time
    (`StreamedSamples`); `samples` then holds no rows."""

    @classmethod
    def from_records(
        cls, meta: RunMeta | None = None, records: list[BaseModel] | tuple = ()
    ) -> Trace:
        """Build a trace from schema records of any table, in the order given."""
        rows: dict[str, list[dict]] = {t: [] for t in TABLES}
        for rec in records:
            tag = TAG_OF_MODEL.get(type(rec))
            if tag is None:
                raise TypeError(f"not a trace record: {type(rec).__name__}")
            rows[RECORD_TAGS[tag]].append(rec.model_dump(mode="json"))
        frames = {
            t: validate_frame(pd.DataFrame(r), TABLES[t], table=t) if r else empty_frame(TABLES[t])
            for t, r in rows.items()
        }
        return cls(meta=meta or RunMeta(), **frames)

    def table(self, name: str) -> pd.DataFrame:
        return getattr(self, name)

    def validated(self, *, source: str | None = None) -> Trace:
        """The same trace with every table checked and in canonical dtypes (raises TraceError)."""
        frames = {
            t: validate_frame(self.table(t), TABLES[t], table=t, source=source) for t in TABLES
        }
        return Trace(meta=self.meta, skipped=list(self.skipped), **frames)

    def skipped_summary(self) -> str:
        return summarize_skipped(self.skipped)

    def workload_notes(self) -> list[str]:
        """What `to_workload` has to infer because the trace lacks per-sample lengths."""
        return inference_notes(self.steps, self.sample_frame())

    def to_workload(self) -> Workload:
        """Per-sample lengths of every step, in step order; inferred where not recorded.

        Steps without sample records get lengths synthesized from their recorded statistics;
        `workload_notes()` says exactly what was synthesized.
        """
        return infer_workload(self.steps, self.sample_frame(), name=self._name()).workload

    def sample_frame(self) -> pd.DataFrame:
        """The samples as a table: `samples`, or the lengths read without one."""
        if self.sample_lengths is not None:
            return self.sample_lengths.held().frame()
        return self.samples

    def _name(self) -> str:
        return Path(self.meta.source_path).stem if self.meta.source_path else self.meta.source


def plain_column(col: pd.Series, kind: ColumnKind) -> list:
    """A column as Python values, nulls as None, converted in bulk rather than per value."""
    if kind is ColumnKind.ROLES:
        return [[str(x) for x in v] for v in col.tolist()]
    if not col.isna().any():
        return col.to_numpy().tolist()
    return col.astype(object).where(col.notna(), None).tolist()


_ALLOWED_ARROW = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_boolean,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_null,
)


def plain_arrow_type(t: pa.DataType) -> bool:
    if any(check(t) for check in _ALLOWED_ARROW):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)
    return False


def meta_from_dict(raw: dict, *, source: str, line: int | None, source_path: str) -> RunMeta:
    try:
        meta = RunMeta.model_validate(raw)
    except ValidationError as err:
        raise first_validation_problem(err, source=source, line=line) from None
    if meta.schema_version != RunMeta().schema_version:
        raise TraceError(
            f"unknown schema version {meta.schema_version}",
            source=source,
            line=line,
            field="schema_version",
        )
    return meta if meta.source_path else meta.model_copy(update={"source_path": source_path})
