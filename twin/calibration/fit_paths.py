"""The bandwidth of each transfer path, fitted to the executor's per-transfer records.

Every live resize records each piece of state it moved: its path (shm, network, device), bytes
and seconds (`traces.transfers`). A path's sustained bandwidth is its bytes over its seconds, all
its transfers together: the least-squares rate of `seconds = bytes / bandwidth` weighted by
size, which charges a path its per-transfer overheads as a phase pays them. Paths the records do
not show keep the base model's figure (or stay unknown). The same-node path is the one the
records' same-node pieces took (device where any went device to device, else shm).

A phase's `s_per_gb` means its rate on the same-node path; a record of a run over several nodes
is fitted at the duration it would have had there (`same_node_durations`): less, for its pieces
that took another path, their gigabytes times that path's extra seconds per GB.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dynaresize.traces.io import Trace
from dynaresize.traces.phases import TransferPath
from dynaresize.traces.transfers import transfers_frame

from ..costs.transfer_paths import PathBandwidths

GB = 1e9


@dataclass(frozen=True)
class PathFit:
    bandwidths: PathBandwidths
    notes: list[str]


def transfer_records(traces: Sequence[Trace]) -> pd.DataFrame:
    """Every trace's transfer records, with the index of its trace."""
    frames = [transfers_frame(t.extras).assign(trace_index=i) for i, t in enumerate(traces)]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def same_node_durations(
    group: pd.DataFrame, transfers: pd.DataFrame, bandwidths: PathBandwidths
) -> np.ndarray:
    """Each phase record's duration less the extra time of its pieces off the same-node path
    (gigabytes times the difference of seconds per GB): what it would have taken on one node.
    Records that moved no bytes, and paths of unknown bandwidth, are left as they are."""
    durations = group["duration_s"].to_numpy(float).copy()
    same = bandwidths.seconds_per_gb(bandwidths.same_node_path)
    if transfers.empty or same is None:
        return durations
    extra: dict[tuple[int, int, str], float] = {}
    for (trace_index, resize_id, phase, path), rows in transfers.groupby(
        ["trace_index", "resize_id", "phase", "path"]
    ):
        rate = bandwidths.seconds_per_gb(TransferPath(path))
        if path == bandwidths.same_node_path.value or rate is None:
            continue
        key = (int(trace_index), int(resize_id), str(phase))
        extra[key] = extra.get(key, 0.0) + rows["num_bytes"].sum() / GB * (rate - same)
    for i, row in enumerate(group.itertuples(index=False)):
        if row.bytes_moved > 0:
            phase = str(getattr(row.phase, "value", row.phase))
            key = (int(row.trace_index), int(row.resize_id), phase)
            durations[i] = max(0.0, durations[i] - extra.get(key, 0.0))
    return durations


def fit_path_bandwidths(
    traces: Sequence[Trace], *, base: PathBandwidths | None = None
) -> PathFit | None:
    """Bandwidth per path from the traces' transfer records; None when they have none."""
    records = transfer_records(traces)
    if records.empty:
        return None
    fitted: dict[str, float | None] = {}
    notes = []
    for path in TransferPath:
        rows = records[records["path"] == path.value]
        seconds = rows["seconds"].to_numpy(float)
        num_bytes = rows["num_bytes"].to_numpy(float)
        if len(rows) == 0 or seconds.sum() <= 0 or num_bytes.sum() <= 0:
            continue
        gbps = num_bytes.sum() / GB / seconds.sum()
        per_transfer = num_bytes[seconds > 0] / GB / seconds[seconds > 0]
        fitted[f"{path.value}_gbps"] = float(gbps)
        notes.append(
            f"path {path.value}: {gbps:.3g} GB/s over {len(rows)} transfers "
            f"({num_bytes.sum() / GB:.3g} GB in {seconds.sum():.3g} s; per transfer median "
            f"{np.median(per_transfer):.3g} GB/s, range {per_transfer.min():.3g}-"
            f"{per_transfer.max():.3g})"
        )
    same_node = (
        TransferPath.DEVICE if (records["path"] == TransferPath.DEVICE.value).any() else None
    )
    kept = base.model_dump() if base is not None else {}
    same_node_path = same_node or kept.get("same_node_path", TransferPath.SHM)
    source = (
        f"fitted by dynaresize calibrate from {len(records)} transfer records of "
        f"{sum(1 for t in traces if not transfers_frame(t.extras).empty)} traces"
    )
    bandwidths = PathBandwidths.model_validate(
        kept
        | {k: v for k, v in fitted.items() if v is not None}
        | {"same_node_path": same_node_path, "source": source}
    )
    return PathFit(bandwidths=bandwidths, notes=notes)
