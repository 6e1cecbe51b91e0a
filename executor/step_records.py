"""What the driver records of a step, a decision and a resize, built from what the workers reported.

Pure functions of the step's batch, the trainers' reports and the clock readings: the trace
records (`traces.schema`) and the lineage records the lineage check reads
(`run_folder.records.LineageRecord`). The session hands them to its run log
(`run_folder/run_log.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from dynaresize.policies.types import (
    CandidatePrediction,
    Decision,
    StepObservation,
)
from dynaresize.traces.phases import PipelineMode, StrategyName
from dynaresize.traces.schema import (
    DecisionRecord,
    ExtraMetricRecord,
    ResizePhaseRecord,
    SampleRecord,
    StepRecord,
)
from dynaresize.traces.transfers import TransferRecord, to_extra
from dynaresize.traces.worker_steps import (
    rollout_replica_extra,
    train_worker_extra,
)

from .batch import RolloutBatch
from .roles import RoleMap
from .run_folder.records import LineageRecord
from .strategies.strategy import PhaseTiming
from .worker.objective import LogprobGap
from .worker.trainer import TrainReport


@dataclass(frozen=True)
class StepClock:
    """When a step ran on the run's clock, and how long its weight sync took."""

    start_s: float
    end_s: float
    sync_s: float

    @property
    def step_s(self) -> float:
        return self.end_s - self.start_s


def step_record(
    *,
    step: int,
    batch: RolloutBatch,
    reports: Mapping[int, TrainReport],
    roles: RoleMap,
    clock: StepClock,
    pipeline: PipelineMode,
    concurrent: RolloutBatch | None,
    resize_id: int | None,
) -> StepRecord:
    """The step's trace record. `concurrent` is the batch generated while this step trained
    (one_step_off); `resize_id` the resize at the boundary before the step, if any."""
    alloc = roles.allocation
    train_s = max(r.train_s for r in reports.values())
    busy_rollout = concurrent.rollout_s if concurrent else 0.0
    if pipeline is PipelineMode.SYNC:
        busy_rollout = batch.rollout_s
    lengths = batch.response_lengths()
    step_s, sync_s = clock.step_s, clock.sync_s
    gap = sum((r.logprob_gap for r in reports.values()), LogprobGap())
    return StepRecord(
        step=step,
        start_s=clock.start_s,
        end_s=clock.end_s,
        rollout_s=batch.rollout_s,
        train_s=train_s,
        sync_s=sync_s,
        step_s=step_s,
        idle_train_gpu_s=max(0.0, step_s - train_s - sync_s) * alloc.train_gpus,
        idle_rollout_gpu_s=max(0.0, step_s - busy_rollout - sync_s) * alloc.rollout_gpus,
        train_gpus=alloc.train_gpus,
        rollout_gpus=alloc.rollout_gpus,
        device_roles=roles.device_roles(),
        resize_id=resize_id,
        rollout_batch_id=batch.batch_id,
        rollout_weights_version=batch.weights_version,
        num_samples=len(batch.samples),
        tokens=batch.num_tokens(),
        response_len_mean=float(lengths.mean()),
        response_len_p50=float(np.percentile(lengths, 50)),
        response_len_p99=float(np.percentile(lengths, 99)),
        response_len_max=float(lengths.max()),
        engine_logprob_abs_diff_mean=gap.mean,
    )


def sample_records(step: int, batch: RolloutBatch) -> list[SampleRecord]:
    return [
        SampleRecord(
            step=step,
            sample_index=i,
            prompt_tokens=len(s.prompt_token_ids),
            response_tokens=len(s.response_token_ids),
            device=s.generated_by_device,
            finish_s=None,
            data_source=s.data_source,
            extra_info_index=s.extra_info_index,
        )
        for i, s in enumerate(batch.samples)
    ]


def step_rows(
    step: int, batch: RolloutBatch, reports: Mapping[int, TrainReport]
) -> tuple[list[ExtraMetricRecord | SampleRecord], list[LineageRecord]]:
    """What the run log keeps of a step beside its step record: the trace rows (its samples,
    then every worker's part) and the lineage records."""
    rows: list[ExtraMetricRecord | SampleRecord] = [*sample_records(step, batch)]
    rows += worker_step_records(step, batch, reports)
    return rows, list(lineage_records(step, batch, reports))


def worker_step_records(
    step: int, batch: RolloutBatch, reports: Mapping[int, TrainReport]
) -> list[ExtraMetricRecord]:
    """Every trainer's part of the step and every replica's part of its batch, as trace rows:
    where the step record's slowest-worker times went."""
    rows = [rollout_replica_extra(r, step=step) for r in batch.replicas]
    for _, report in sorted(reports.items()):
        if report.parts is not None:
            rows.append(train_worker_extra(report.parts, step=step))
    return rows


def lineage_records(
    step: int, batch: RolloutBatch, reports: Mapping[int, TrainReport]
) -> Iterator[LineageRecord]:
    """One record per sample a trainer reports having consumed (what it did, not the plan)."""
    by_key = {s.key: s for s in batch.samples}
    for report in reports.values():
        for key in report.consumed:
            sample = by_key[key]
            yield LineageRecord(
                step=step,
                rollout_batch_id=batch.batch_id,
                prompt_id=key[0],
                sample_index=key[1],
                generated_weights_version=sample.weights_version,
                generated_weights_digest=sample.weights_digest,
                generated_by_device=sample.generated_by_device,
                consumed_by_device=report.worker_id,
                trainer_weights_version=report.weights_version,
                response_tokens=len(sample.response_token_ids),
                data_source=sample.data_source,
                extra_info_index=sample.extra_info_index,
            )


def decision_record(
    obs: StepObservation,
    decision: Decision,
    *,
    policy: str,
    cost_source: str,
    resize_id: int | None,
    prior_over_measured: float | None = None,
) -> DecisionRecord:
    """The record of one policy call; `prior_over_measured` only on the first call after the
    run's first measured resize (the prior over that measurement)."""
    chosen: CandidatePrediction | None = None
    if decision.is_resize and decision.target is not None:
        chosen = obs.candidate(decision.target)
    return DecisionRecord(
        step=obs.step,
        time_s=obs.now_s,
        policy=policy,
        decision=decision.kind.value,
        from_allocation=obs.allocation.label,
        to_allocation=decision.target.label if decision.target else None,
        reason=decision.reason,
        cost_source=cost_source,
        predicted_resize_critical_s=chosen.predicted_resize_critical_s if chosen else None,
        resize_id=resize_id,
        prior_over_measured=prior_over_measured,
    )


@dataclass(frozen=True)
class ResizeLabel:
    """Which resize a phase belongs to: its id, the step before it, the splits it moved between."""

    resize_id: int
    step: int
    strategy: StrategyName
    from_allocation: str
    to_allocation: str


def phase_records(label: ResizeLabel, phases: Iterable[PhaseTiming]) -> list[ResizePhaseRecord]:
    return [
        ResizePhaseRecord(
            resize_id=label.resize_id,
            step=label.step,
            phase=p.phase,
            strategy=label.strategy,
            from_allocation=label.from_allocation,
            to_allocation=label.to_allocation,
            start_s=p.start_s,
            end_s=p.end_s,
            critical=p.critical,
            bytes_moved=p.bytes_moved,
            comm_cache_hits=p.comm_cache_hits,
            comm_groups_built=p.comm_groups_built,
        )
        for p in phases
    ]


def transfer_records(label: ResizeLabel, phases: Iterable[PhaseTiming]) -> list[ExtraMetricRecord]:
    """Every transfer of the resize's phases (path, bytes, seconds), as trace rows."""
    return [
        to_extra(
            TransferRecord(
                resize_id=label.resize_id,
                phase=stat.phase,
                path=stat.path,
                src_worker=stat.src_worker,
                dst_worker=stat.dst_worker,
                src_node=stat.src_node,
                dst_node=stat.dst_node,
                num_bytes=stat.num_bytes,
                seconds=stat.seconds,
            ),
            step=label.step,
        )
        for phase in phases
        for stat in phase.transfers
    ]
