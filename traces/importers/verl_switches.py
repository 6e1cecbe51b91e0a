"""veRL's measured switches of trainer GPUs, as resize records, and its controller's decisions.

veRL's separate-async trainer lends its trainer GPUs to rollout at the end of a step
(`timing_s/switch_to_rollout`: the engines on them wake and join the load balancer) and takes
them back before training (`timing_s/switch_to_trainer`: removed from routing, in-flight requests
aborted, engines put to sleep). Each is a change of role of the trainer GPUs, in process, on the
critical path: one resize of the `overlapped` strategy with one phase, `rollout_reinit` for a lend
and `worker_reinit` for a reclaim, so that `dynaresize calibrate` fits the switch costs from the
log. Its controller's decision at each step's end (`separate_async/decision/should_switch_to_
rollout`) becomes a decision record, so a replay shows what it chose beside the project's
policies.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..phases import PhaseName, StrategyName
from ..schema import DecisionRecord, ResizePhaseRecord
from ..validation import empty_frame
from .verl_keys import SWITCH_TO_ROLLOUT, SWITCH_TO_TRAINER

CONTROLLER = "verl_separate_async"
"""The `policy` of the decision records of veRL's separate-async controller."""


def switch_records(values: dict, steps: pd.DataFrame) -> pd.DataFrame:
    """One resize (one phase) per measured switch; lends end their step, reclaims start it."""
    rows = []
    train = int(steps["train_gpus"].iloc[0]) if len(steps) else 0
    rollout = int(steps["rollout_gpus"].iloc[0]) if len(steps) else 0
    split, lent = f"{train}:{rollout}", f"0:{train + rollout}"
    to_trainer = np.nan_to_num(values[SWITCH_TO_TRAINER], nan=0.0)
    to_rollout = np.nan_to_num(values[SWITCH_TO_ROLLOUT], nan=0.0)
    for k, row in enumerate(steps.itertuples(index=False)):
        step = int(row.step)
        if to_trainer[k] > 0:
            rows.append(
                _record(
                    step=max(step - 1, 0),
                    phase=PhaseName.WORKER_REINIT,
                    moves=(lent, split),
                    span=(float(row.start_s), float(row.start_s) + to_trainer[k]),
                )
            )
        if to_rollout[k] > 0:
            rows.append(
                _record(
                    step=step,
                    phase=PhaseName.ROLLOUT_REINIT,
                    moves=(split, lent),
                    span=(float(row.end_s) - to_rollout[k], float(row.end_s)),
                )
            )
    if not rows:
        return empty_frame(ResizePhaseRecord)
    frame = pd.DataFrame(rows).sort_values("start_s", kind="stable").reset_index(drop=True)
    frame["resize_id"] = np.arange(len(frame), dtype=np.int64)
    return frame


def _record(
    *, step: int, phase: PhaseName, moves: tuple[str, str], span: tuple[float, float]
) -> dict:
    return {
        "schema_version": 1,
        "resize_id": 0,
        "step": step,
        "phase": phase.value,
        "strategy": StrategyName.OVERLAPPED.value,
        "from_allocation": moves[0],
        "to_allocation": moves[1],
        "start_s": span[0],
        "end_s": span[1],
        "critical": True,
        "bytes_moved": 0,
    }


def controller_decisions(values: dict, steps: pd.DataFrame) -> pd.DataFrame:
    """The separate-async controller's decision at the end of every step that logged one."""
    decided = values["should_switch"]
    rows = []
    train = int(steps["train_gpus"].iloc[0]) if len(steps) else 0
    rollout = int(steps["rollout_gpus"].iloc[0]) if len(steps) else 0
    split, lent = f"{train}:{rollout}", f"0:{train + rollout}"
    for k, row in enumerate(steps.itertuples(index=False)):
        if np.isnan(decided[k]):
            continue
        lend = decided[k] > 0.5
        rows.append(
            {
                "schema_version": 1,
                "step": int(row.step),
                "time_s": float(row.end_s),
                "policy": CONTROLLER,
                "decision": "resize" if lend else "hold",
                "from_allocation": split,
                "to_allocation": lent if lend else None,
                "reason": "veRL lends the trainer GPUs to rollout"
                if lend
                else "veRL keeps the trainer GPUs training",
                "cost_source": "measured",
                "predicted_resize_critical_s": None,
                "resize_id": None,
            }
        )
    if not rows:
        return empty_frame(DecisionRecord)
    return pd.DataFrame(rows)
