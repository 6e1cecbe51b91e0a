"""The data that flows between roles: rollout samples, a step's batch, and its split over trainers.

Every sample carries its identity (prompt id, index in its group) and its lineage (which worker
generated it with which weights version), so the records can prove that each step trained on
exactly the batch it should have, whatever resizes happened in between.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dynaresize.traces.worker_steps import RolloutReplicaStep


@dataclass(frozen=True)
class RolloutSample:
    """One generated response, scored."""

    batch_id: int
    prompt_id: int
    sample_index: int
    prompt_token_ids: tuple[int, ...]
    response_token_ids: tuple[int, ...]
    reward: float
    hit_length_cap: bool
    finish_s: float
    generated_by_device: int
    weights_version: int
    advantage: float = 0.0
    weights_digest: str | None = None
    """Digest of the weights the generating engine held (`rl.weights_digest`), when known."""
    engine_logprobs: tuple[float, ...] | None = None
    """The engine's log-probability of each response token, when it reports them (the trainer
    recomputes its own; the difference is a health figure of the step)."""
    data_source: str | None = None
    """`data_source` of the prompt's dataset row (`repeat` for the built-in task), so the records
    trace the sample back to the user's data; None in batches saved before it was kept."""
    extra_info_index: str | None = None
    """`extra_info.index` of that row, as text; None where the row has none."""

    @property
    def key(self) -> tuple[int, int]:
        return (self.prompt_id, self.sample_index)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.response_token_ids)


@dataclass
class RolloutBatch:
    """All samples of one step's rollout, ordered by (prompt id, sample index)."""

    batch_id: int
    weights_version: int
    samples: list[RolloutSample]
    rollout_s: float
    """Longest rollout replica's wall time for this batch (the stage's duration)."""
    replica_s: dict[int, float] = field(default_factory=dict)
    """Wall time of each replica (worker id) that took part."""
    replicas: list[RolloutReplicaStep] = field(default_factory=list)
    """Each replica's part in detail, for the trace (none for a batch read back from disk)."""

    def response_lengths(self) -> np.ndarray:
        return np.array([len(s.response_token_ids) for s in self.samples], dtype=np.int64)

    def prompt_lengths(self) -> np.ndarray:
        return np.array([len(s.prompt_token_ids) for s in self.samples], dtype=np.int64)

    def num_tokens(self) -> int:
        return int(sum(s.num_tokens for s in self.samples))


def split_evenly(items: list, num_parts: int) -> list[list]:
    """Contiguous parts whose sizes differ by at most one (the first ones larger)."""
    if num_parts < 1:
        raise ValueError("cannot split into fewer than one part")
    bounds = np.linspace(0, len(items), num_parts + 1).round().astype(int)
    return [items[bounds[i] : bounds[i + 1]] for i in range(num_parts)]


def split_by_prompt(samples: list[RolloutSample], num_parts: int) -> list[list[RolloutSample]]:
    """Split a batch over trainers by whole prompt groups, in prompt order.

    Keeping a group on one trainer is not needed for correctness (advantages are computed before
    the split) but keeps a prompt's samples together in the lineage records.
    """
    groups: dict[int, list[RolloutSample]] = {}
    for sample in samples:
        groups.setdefault(sample.prompt_id, []).append(sample)
    ordered = [groups[k] for k in sorted(groups)]
    return [[s for group in part for s in group] for part in split_evenly(ordered, num_parts)]


def batch_to_json(batch: RolloutBatch) -> dict:
    return {
        "batch_id": batch.batch_id,
        "weights_version": batch.weights_version,
        "rollout_s": batch.rollout_s,
        "replica_s": {str(k): v for k, v in batch.replica_s.items()},
        "samples": [dataclasses.asdict(s) for s in batch.samples],
    }


def batch_from_json(data: dict) -> RolloutBatch:
    samples = [
        RolloutSample(
            **{
                **s,
                "prompt_token_ids": tuple(s["prompt_token_ids"]),
                "response_token_ids": tuple(s["response_token_ids"]),
                "engine_logprobs": (
                    None if s.get("engine_logprobs") is None else tuple(s["engine_logprobs"])
                ),
            }
        )
        for s in data["samples"]
    ]
    return RolloutBatch(
        batch_id=int(data["batch_id"]),
        weights_version=int(data["weights_version"]),
        samples=samples,
        rollout_s=float(data["rollout_s"]),
        replica_s={int(k): float(v) for k, v in data["replica_s"].items()},
    )


BATCHES_DIR = "batches"


def batch_path(folder: Path, batch_id: int) -> Path:
    return Path(folder) / f"batch_{batch_id:06d}.json"


def save_batch(out_dir: Path, batch: RolloutBatch) -> None:
    """Keep a generated batch (tokens, rewards, advantages, lineage) for a later replay."""
    folder = Path(out_dir) / BATCHES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    batch_path(folder, batch.batch_id).write_text(json.dumps(batch_to_json(batch)))


def load_batch(folder: Path, batch_id: int) -> RolloutBatch:
    path = batch_path(folder, batch_id)
    if not path.is_file():
        raise FileNotFoundError(path)
    return batch_from_json(json.loads(path.read_text()))
