"""Per-path pricing of a re-cut: the state that changes owner, split by the path it takes.

A resize re-cuts the trainers' equal contiguous slices; from each old trainer to each new one
moves the overlap of their slices. Trainers are the lowest worker ids (a trainer's rank is its
worker id, as in the executor), and workers fill the nodes in order, `workers_per_node` each. So
a piece between two workers of one node takes the same-node path (shared memory, or device to
device where the run copies that way) and a piece between two nodes the network.

A phase's `s_per_gb` is what its bytes cost on the same-node path: single-node runs measure it.
With measured bandwidths of the paths (`PathBandwidths`, fitted by `dynaresize calibrate` from
the executor's transfer records), each gigabyte that takes another path costs the difference of
the two paths' seconds per GB on top. On one node, or without per-path bandwidths, nothing
changes: the figures of a model without them are reproduced exactly.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dynaresize.traces.phases import TransferPath


class PathBandwidths(BaseModel):
    """Sustained bandwidth of each path a re-cut's pieces take, and where the figures come from."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    shm_gbps: float | None = Field(
        default=None, gt=0, description="Through shared memory on one node (GB/s); None: unknown."
    )
    device_gbps: float | None = Field(
        default=None, gt=0, description="GPU to GPU on one node (GB/s); None: unknown."
    )
    network_gbps: float | None = Field(
        default=None, gt=0, description="Between nodes (GB/s); None: unknown."
    )
    same_node_path: TransferPath = Field(
        default=TransferPath.SHM,
        description="The path pieces between workers of one node take: shm or device.",
    )
    source: str = Field(
        default="",
        description="Where the figures come from (the calibration's traces, a benchmark run).",
    )

    @model_validator(mode="after")
    def _same_node_path_stays_on_the_node(self) -> PathBandwidths:
        if self.same_node_path is TransferPath.NETWORK:
            raise ValueError("path_bandwidths.same_node_path: shm or device, not network")
        return self

    def seconds_per_gb(self, path: TransferPath) -> float | None:
        gbps = {
            TransferPath.SHM: self.shm_gbps,
            TransferPath.DEVICE: self.device_gbps,
            TransferPath.NETWORK: self.network_gbps,
        }[path]
        return None if gbps is None else 1.0 / gbps


def recut_shares_by_path(
    trainers_before: int,
    trainers_after: int,
    *,
    workers_per_node: int | None,
    same_node_path: TransferPath = TransferPath.SHM,
) -> dict[TransferPath, float]:
    """Share of the state that changes owner on each path when `trainers_before` equal slices
    are re-cut into `trainers_after`; the shares add up to `changed_owner_fraction`. Without
    `workers_per_node` every worker counts as one node's."""
    if trainers_before < 1 or trainers_after < 1:
        raise ValueError(f"trainer counts must be >= 1, got {trainers_before}, {trainers_after}")
    shares = {same_node_path: 0.0, TransferPath.NETWORK: 0.0}
    for old in range(trainers_before):
        for new in range(trainers_after):
            if old == new:
                continue  # the same worker keeps the overlap: nothing moves
            lo = max(old / trainers_before, new / trainers_after)
            hi = min((old + 1) / trainers_before, (new + 1) / trainers_after)
            if hi <= lo:
                continue
            same = workers_per_node is None or old // workers_per_node == new // workers_per_node
            shares[same_node_path if same else TransferPath.NETWORK] += hi - lo
    return shares


def off_path_seconds(
    gb_state: float, shares: dict[TransferPath, float], bandwidths: PathBandwidths
) -> float:
    """What the pieces off the same-node path add to a phase priced at same-node rates:
    their gigabytes times the difference of seconds per GB (0 where a rate is unknown)."""
    same = bandwidths.seconds_per_gb(bandwidths.same_node_path)
    if same is None:
        return 0.0
    extra = 0.0
    for path, share in shares.items():
        rate = bandwidths.seconds_per_gb(path)
        if path is bandwidths.same_node_path or rate is None or share <= 0:
            continue
        extra += gb_state * share * (rate - same)
    return extra
