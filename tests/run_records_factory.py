"""A small, schema-valid run (steps, resize phases, decisions) for the plot and trace tests.

Eight GPUs start on 6:2, move to 4:4 before step 10 (overlapped: two critical phases and one
background phase) and to 5:3 before step 20 (stop-and-rebuild, all critical). Every record goes
through the trace schema's validation, so the frames look exactly like a recorded run's.
"""

from __future__ import annotations

import pandas as pd

from dynaresize.traces.schema import DecisionRecord, ResizePhaseRecord, StepRecord

NUM_STEPS = 30
RESIZES = {
    10: (
        "6:2",
        "4:4",
        "overlapped",
        [
            ("state_export", 60.7, True),
            ("worker_reinit", 32.6, True),
            ("optimizer_restore", 45.8, False),
        ],
    ),
    20: (
        "4:4",
        "5:3",
        "stop_and_rebuild",
        [("state_export", 59.7, True), ("worker_reinit", 60.3, True)],
    ),
}
STAGE_S = {"6:2": (38.0, 15.0), "4:4": (22.0, 21.0), "5:3": (26.0, 18.0)}
SYNC_S = 1.5


def _roles(label: str) -> list[str]:
    train, rollout = (int(x) for x in label.split(":"))
    return ["train"] * train + ["rollout"] * rollout


def make_run() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(steps, resizes, decisions) as DataFrames with the schema's columns."""
    steps, phases, decisions = [], [], []
    clock, allocation, resize_id = 0.0, "6:2", 0
    for k in range(NUM_STEPS):
        took_effect = None
        if k in RESIZES:
            before, after, strategy, spec = RESIZES[k]
            decisions.append(
                DecisionRecord(
                    step=k - 1,
                    time_s=clock,
                    policy="hysteresis",
                    decision="resize",
                    from_allocation=before,
                    to_allocation=after,
                    reason="imbalance",
                    resize_id=resize_id,
                )
            )
            start = clock
            for phase, duration, critical in spec:
                phases.append(
                    ResizePhaseRecord(
                        resize_id=resize_id,
                        step=k - 1,
                        phase=phase,
                        strategy=strategy,
                        from_allocation=before,
                        to_allocation=after,
                        start_s=start,
                        end_s=start + duration,
                        critical=critical,
                    )
                )
                if critical:
                    clock = start + duration
                start += duration
            allocation, took_effect = after, resize_id
            resize_id += 1
        elif k > 0:
            decisions.append(
                DecisionRecord(
                    step=k - 1,
                    time_s=clock,
                    policy="hysteresis",
                    decision="hold",
                    from_allocation=allocation,
                )
            )
        rollout_s, train_s = STAGE_S[allocation]
        step_s = max(rollout_s, train_s) + SYNC_S
        train, rollout = (int(x) for x in allocation.split(":"))
        steps.append(
            StepRecord(
                step=k,
                start_s=clock,
                end_s=clock + step_s,
                rollout_s=rollout_s,
                train_s=train_s,
                sync_s=SYNC_S,
                step_s=step_s,
                idle_train_gpu_s=train * (step_s - train_s - SYNC_S),
                idle_rollout_gpu_s=rollout * (step_s - rollout_s),
                train_gpus=train,
                rollout_gpus=rollout,
                device_roles=_roles(allocation),
                resize_id=took_effect,
                rollout_batch_id=k,
                rollout_weights_version=max(0, k - 1),
                num_samples=64,
                tokens=64_000,
                response_len_mean=900.0,
                response_len_p50=600.0,
                response_len_p99=8000.0,
                response_len_max=12000.0,
            )
        )
        clock += step_s
    frame = lambda records: pd.DataFrame([r.model_dump(mode="json") for r in records])  # noqa: E731
    return frame(steps), frame(phases), frame(decisions)
