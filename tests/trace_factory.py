"""Builders of small, valid traces for the traces tests (not a test module itself)."""

from __future__ import annotations

from dynaresize.traces.io import Trace
from dynaresize.traces.schema import (
    DecisionRecord,
    ExtraMetricRecord,
    PipelineMode,
    ResizePhaseRecord,
    RunMeta,
    SampleRecord,
    StepRecord,
)


def step_record(
    step: int, *, start_s: float = 0.0, train_gpus: int = 2, rollout_gpus: int = 2, **overrides
) -> StepRecord:
    step_s = 10.0 + step
    fields = dict(
        step=step,
        start_s=start_s,
        end_s=start_s + step_s,
        rollout_s=8.0 + step,
        train_s=6.5,
        sync_s=1.25,
        step_s=step_s,
        idle_train_gpu_s=2 * (step_s - 6.5),
        idle_rollout_gpu_s=2 * (step_s - 8.0 - step),
        train_gpus=train_gpus,
        rollout_gpus=rollout_gpus,
        device_roles=["train"] * train_gpus + ["rollout"] * rollout_gpus,
        rollout_batch_id=step,
        rollout_weights_version=max(0, step - 1),
        num_samples=4,
        tokens=4000 + 17 * step,
        response_len_mean=800.5,
        response_len_p50=700.0,
        response_len_p99=1900.0,
        response_len_max=2000.0,
    )
    fields.update(overrides)
    return StepRecord(**fields)


def small_trace(num_steps: int = 6) -> Trace:
    records = []
    t = 0.0
    for k in range(num_steps):
        rec = step_record(k, start_s=t, resize_id=0 if k == 3 else None)
        records.append(rec)
        t = rec.end_s
        for i in range(4):
            records.append(
                SampleRecord(
                    step=k,
                    sample_index=i,
                    prompt_tokens=100 + i,
                    response_tokens=300 * (i + 1) + k,
                    rollout_replica=i % 2 if k % 2 else None,
                    finish_s=None if k % 2 else t - 1.0 + 0.1 * i,
                )
            )
    records.append(
        ResizePhaseRecord(
            resize_id=0,
            step=2,
            phase="state_export",
            strategy="overlapped",
            from_allocation="2:2",
            to_allocation="1:3",
            start_s=30.0,
            end_s=31.5,
            critical=True,
            bytes_moved=123456789,
        )
    )
    records.append(
        ResizePhaseRecord(
            resize_id=0,
            step=2,
            phase="optimizer_restore",
            strategy="overlapped",
            from_allocation="2:2",
            to_allocation="1:3",
            start_s=31.5,
            end_s=40.0,
            critical=False,
        )
    )
    records.append(
        DecisionRecord(
            step=2,
            time_s=30.0,
            policy="hysteresis",
            decision="resize",
            from_allocation="2:2",
            to_allocation="1:3",
            reason="imbalance",
            predicted_resize_critical_s=1.4,
            resize_id=0,
        )
    )
    records.append(
        DecisionRecord(
            step=3, time_s=43.0, policy="hysteresis", decision="hold", from_allocation="1:3"
        )
    )
    records.append(ExtraMetricRecord(step=1, key="actor/entropy", value_json="0.25"))
    meta = RunMeta(
        source="twin",
        cluster="1 node, 4x H200",
        num_gpus=4,
        model_params_b=8.0,
        pipeline_mode=PipelineMode.ONE_STEP_OFF,
        start_train_gpus=2,
        start_rollout_gpus=2,
        notes=["made by the test factory"],
        labels={"seed": "1"},
    )
    return Trace.from_records(meta, records)
