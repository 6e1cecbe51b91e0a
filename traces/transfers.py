"""One record per state transfer of a resize: which path it took, how many bytes, how long.

A resize re-cuts the trainers' slices; each piece that changes worker is one transfer, and it
travels by one `TransferPath` (shared memory on one node, the network between nodes, or device to
device). The executor records every transfer and the twin's calibration fits a bandwidth per
path from them. They ride in the trace as extra-metric records (key `resize_transfer`, the
record as JSON), so trace schema v1 carries them without a new table and every reader that does
not know them passes them through untouched.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from .phases import PhaseName, TransferPath
from .schema import ExtraMetricRecord

TRANSFER_KEY = "resize_transfer"
"""The extra-metric key transfer records are stored under."""


class TransferRecord(BaseModel):
    """One piece of trainer state moved from one worker to another during a resize."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    resize_id: int = Field(ge=0, description="Resize the transfer belongs to.")
    phase: PhaseName = Field(description="Resize phase that moved it.")
    path: TransferPath = Field(description="shm, network or device.")
    src_worker: int = Field(ge=0, description="Worker that sent the bytes.")
    dst_worker: int = Field(ge=0, description="Worker that received them.")
    src_node: str = Field(description="Node of the sender (the cluster's node id).")
    dst_node: str = Field(description="Node of the receiver.")
    num_bytes: int = Field(ge=0, description="Bytes moved.")
    seconds: float = Field(
        ge=0, description="Wall time on the receiver, first byte asked to last byte in place (s)."
    )

    @property
    def cross_node(self) -> bool:
        return self.src_node != self.dst_node


def to_extra(record: TransferRecord, *, step: int) -> ExtraMetricRecord:
    """The trace row of a transfer; `step` is the resize's step (the last step before it)."""
    return ExtraMetricRecord(step=step, key=TRANSFER_KEY, value_json=record.model_dump_json())


TRANSFER_COLUMNS = [*TransferRecord.model_fields, "step"]


def transfers_frame(extras: pd.DataFrame) -> pd.DataFrame:
    """The transfer records among a trace's extra metrics, one row each (empty if none)."""
    if extras.empty or "key" not in extras:
        return pd.DataFrame(columns=TRANSFER_COLUMNS)
    rows = extras[extras["key"] == TRANSFER_KEY]
    return pd.DataFrame(
        [_row(step, text) for step, text in zip(rows["step"], rows["value_json"], strict=True)],
        columns=TRANSFER_COLUMNS,
    )


def _row(step: int, value_json: str) -> dict:
    record = TransferRecord.model_validate(json.loads(value_json))
    return record.model_dump(mode="json") | {"step": int(step)}


def totals_by_path(records: Iterable[TransferRecord]) -> dict[str, dict[str, float | None]]:
    """Transfers, bytes and seconds summed per path, and seconds per GB (1e9 bytes; None when
    nothing moved)."""
    counts: dict[str, list] = {}
    totals: dict[str, dict[str, float | None]] = {}
    for record in records:
        sums = counts.setdefault(record.path.value, [0, 0, 0.0])
        sums[0] += 1
        sums[1] += record.num_bytes
        sums[2] += record.seconds
    for path, (transfers, num_bytes, seconds) in counts.items():
        gigabytes = num_bytes / 1e9
        totals[path] = {
            "transfers": transfers,
            "bytes": num_bytes,
            "seconds": seconds,
            "seconds_per_gb": seconds / gigabytes if gigabytes else None,
        }
    return totals
