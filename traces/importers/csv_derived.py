"""Step columns of a trace from the quantities a CSV table gives, and notes on what was derived.

Tables from different frameworks log different subsets (some no rollout time, some no step time,
most no idle time); the trace schema needs them all. Each missing quantity is derived from the
ones present by the rule its pipeline mode implies, and the rule goes into the trace's notes so a
reader knows which numbers were measured. Kept apart from `csv`, which reads and maps the table.
"""

from __future__ import annotations

import numpy as np

from ..schema import PipelineMode
from .common import ImportOptions, device_roles

_SEQUENTIAL = (PipelineMode.COLOCATED, PipelineMode.SYNC)
"""Modes whose stages run one after another within a step."""


def derive_columns(
    values: dict[str, list[float]],
    *,
    time_scale_s: float,
    mode: PipelineMode,
    train_gpus: int,
    rollout_gpus: int,
    options: ImportOptions,
    notes: list[str],
) -> dict:
    """The trace's step columns from the mapped quantities; each derivation adds a note."""
    col = {q: np.asarray(v, float) for q, v in values.items()}
    n = len(col["step"])
    step = col["step"].astype(np.int64)
    scale = time_scale_s
    train = col["train_s"] * scale
    zero = np.zeros(n)
    sync = _filled(col.get("sync_s"), zero, scale)
    if "sync_s" not in col:
        notes.append("no weight-sync column: sync_s = 0")
    wait = col["wait_s"] * scale if "wait_s" in col else None
    if "rollout_s" in col:
        rollout = col["rollout_s"] * scale
    else:
        rollout = np.nan_to_num(wait if wait is not None else np.zeros(n))
        notes.append(
            "no rollout-duration column: rollout_s = the trainer's wait for data, a lower bound "
            "on generation time"
        )
    step_s = _step_seconds(col, mode, rollout, train, sync, wait, scale, notes)
    idle_train, idle_rollout = _idle(
        mode, step_s, rollout, train, sync, wait, train_gpus, rollout_gpus, notes
    )
    lengths = _lengths(col, n, options, notes)
    return {
        "step": step,
        "step_s": step_s,
        "rollout_s": rollout,
        "train_s": train,
        "sync_s": sync,
        "idle_train_gpu_s": idle_train,
        "idle_rollout_gpu_s": idle_rollout,
        "train_gpus": np.full(n, train_gpus, np.int64),
        "rollout_gpus": np.full(n, rollout_gpus, np.int64),
        "device_roles": [device_roles(train_gpus, rollout_gpus) for _ in range(n)],
        "rollout_batch_id": step,
        "rollout_weights_version": step if mode in _SEQUENTIAL else np.maximum(step - 1, 0),
        **lengths,
    }


def _filled(column: np.ndarray | None, default: np.ndarray, scale: float) -> np.ndarray:
    if column is None:
        return default
    return np.where(np.isnan(column), default, column * scale)


def _step_seconds(col, mode, rollout, train, sync, wait, scale, notes) -> np.ndarray:
    derived = (
        rollout + train + sync
        if mode in _SEQUENTIAL
        else (
            np.nan_to_num(wait) + train + sync
            if wait is not None
            else np.maximum(rollout, train) + sync
        )
    )
    if "step_s" in col:
        step_s = np.where(np.isnan(col["step_s"]), derived, col["step_s"] * scale)
        missing = int(np.isnan(col["step_s"]).sum())
        if missing:
            notes.append(f"{missing} rows lack the step time: derived from the stage times")
        return step_s
    how = {
        True: "rollout_s + train_s + sync_s (stages run one after another)",
        False: "wait + train_s + sync_s"
        if wait is not None
        else "max(rollout_s, train_s) + sync_s",
    }[mode in _SEQUENTIAL]
    notes.append(f"no step-time column: step_s = {how}")
    return derived


def _idle(mode, step_s, rollout, train, sync, wait, t_gpus, r_gpus, notes):
    n = len(step_s)
    if mode is PipelineMode.COLOCATED:
        notes.append("colocated: idle GPU-seconds are 0 and train_gpus = rollout_gpus = all GPUs")
        return np.zeros(n), np.zeros(n)
    if mode is PipelineMode.SYNC:
        notes.append("idle GPU-seconds = (step_s - own stage time) x the role's GPUs")
        return (
            np.clip(step_s - train, 0, None) * t_gpus,
            np.clip(step_s - rollout, 0, None) * r_gpus,
        )
    if wait is not None:
        idle_train = np.nan_to_num(wait) * t_gpus
    else:
        idle_train = np.clip(step_s - sync - train, 0, None) * t_gpus
    notes.append(
        "idle GPU-seconds: training = wait (or step_s - sync_s - train_s) x train_gpus; "
        "rollout = max(0, step_s - sync_s - rollout_s) x rollout_gpus"
    )
    return idle_train, np.clip(step_s - sync - rollout, 0, None) * r_gpus


def _lengths(col: dict, n: int, options: ImportOptions, notes: list[str]) -> dict:
    resp_mean = col.get("response_len_mean")
    prompt_mean = col.get("prompt_len_mean")
    if resp_mean is None:
        resp_mean = np.zeros(n)
        notes.append(
            "no response-length column: lengths set to 0 (map response_len_mean to replay the "
            "workload)"
        )
    resp_mean = np.nan_to_num(resp_mean)
    resp_max = col.get("response_len_max")
    if resp_max is None:
        resp_max = resp_mean
        notes.append("no longest-response column: response_len_max = mean (no long tail known)")
    resp_max = np.maximum(np.where(np.isnan(resp_max), resp_mean, resp_max), resp_mean)
    per_sample = resp_mean + (np.nan_to_num(prompt_mean) if prompt_mean is not None else 0.0)
    if "num_samples" in col:
        num = np.nan_to_num(col["num_samples"])
    elif options.num_samples_per_step is not None:
        num = np.full(n, float(options.num_samples_per_step))
    elif "tokens" in col and np.all(per_sample > 0):
        num = np.rint(np.nan_to_num(col["tokens"]) / per_sample)
        notes.append("num_samples inferred as tokens / (mean prompt + mean response length)")
    else:
        num = np.zeros(n)
        notes.append("batch size unknown: num_samples = 0 (give num_samples_per_step)")
    if "tokens" in col:
        tokens = np.nan_to_num(col["tokens"])
    else:
        tokens = num * per_sample
        if num.any():
            notes.append(
                "tokens inferred as num_samples x (mean prompt + mean response length)"
                + ("" if prompt_mean is not None else "; prompt lengths unknown, counted as 0")
            )
    p50 = col.get("response_len_p50")
    p99 = col.get("response_len_p99")
    if p50 is None or p99 is None:
        notes.append("median/p99 response lengths not mapped: set to the mean and the max")
    return {
        "num_samples": np.rint(num).astype(np.int64),
        "tokens": np.rint(tokens).astype(np.int64),
        "response_len_mean": resp_mean,
        "response_len_p50": resp_mean if p50 is None else np.where(np.isnan(p50), resp_mean, p50),
        "response_len_p99": resp_max if p99 is None else np.where(np.isnan(p99), resp_max, p99),
        "response_len_max": resp_max,
    }
