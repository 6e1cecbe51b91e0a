"""Step records from the numbers of a veRL log's training lines, per trainer.

Each trainer's timers mean different things (docs/importers.md): this module says, for each, which
timer is the rollout, the training and the weight sync, where the GPUs sat idle, and which time
(validation, checkpoint saving) is neither and so sits between steps rather than inside one.
"""

from __future__ import annotations

import numpy as np

from .common import device_roles
from .verl_keys import (
    GEN,
    GENERATE_ASYNC,
    PARAM_SYNC,
    SAVE_CHECKPOINT,
    SWITCH_TO_ROLLOUT,
    SWITCH_TO_TRAINER,
    SYNC_ROLLOUT_WEIGHTS,
    TESTING,
    UPDATE_WEIGHTS,
    WAIT_FOR_SAMPLES,
    VerlTrainer,
)

DERIVED_FROM = {
    "step_s": "timing_s/step",
    "end_s": "timing_s/step",
    "start_s": "timing_s/step",
    "train_s": "timing_s/step",
    "rollout_s": "timing_s/gen",
    "sync_s": "timing_s/step",
    "idle_train_gpu_s": "timing_s/gen",
    "idle_rollout_gpu_s": "timing_s/step",
    "tokens": "perf/total_num_tokens",
    "num_samples": "perf/total_num_tokens",
    "response_len_mean": "response_length/mean",
    "response_len_p50": "response_length/mean",
    "response_len_p99": "response_length/max",
    "response_len_max": "response_length/max",
}
"""Step field -> the log key it is computed from, so a problem names what the user can find."""


def _zero_nan(values: np.ndarray) -> np.ndarray:
    return np.nan_to_num(values, nan=0.0)


def validation_and_checkpoint_s(values: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per line: seconds of validation (`timing_s/testing`) and of checkpoint saving."""
    return _zero_nan(values[TESTING]), _zero_nan(values[SAVE_CHECKPOINT])


def step_columns(
    values: dict,
    verl_steps: np.ndarray,
    trainer: VerlTrainer,
    gpus: tuple[int, int],
    notes: list[str],
) -> tuple[dict, np.ndarray]:
    """The steps table's columns and, per step, the seconds between its end and the next start
    that the log accounts for (validation and checkpoints outside the step)."""
    train, rollout = gpus
    n = len(verl_steps)
    step = verl_steps.astype(np.int64) - 1
    step_s = values["timing_s/step"]
    train_s = values["train_s"]
    testing, saving = validation_and_checkpoint_s(values)
    _note_validation(testing, saving, trainer, notes)
    if trainer is VerlTrainer.COLOCATED:
        # veRL's colocated trainer times validation and checkpointing inside its step timer.
        step_s = step_s - testing - saving
        columns = _colocated(values, n, notes)
        version = step.copy()
    elif trainer is VerlTrainer.ONE_STEP_OFF:
        columns = _one_step_off(values, step, train_s, train, rollout, notes)
        version = np.maximum(step - 1, 0)
    elif trainer is VerlTrainer.FULLY_ASYNC:
        columns = _fully_async(values, step_s, train_s, train, rollout, notes)
        version = np.maximum(step - 1, 0)
    else:
        columns = _separate_async(values, train_s, train, notes)
        version = np.maximum(step - 1, 0)
    gaps = testing + saving  # between this step and the next, whichever timer held them
    over = int(values["parts_over_step"].sum())
    if over:
        notes.append(
            f"{over} steps' timers add up to more than timing_s/step by under 1 ms (separate "
            "clocks): their train_s is 0"
        )
    columns.update(
        {
            "step": step,
            "step_s": step_s,
            "train_s": train_s,
            "train_gpus": np.full(n, train, np.int64),
            "rollout_gpus": np.full(n, rollout, np.int64),
            "device_roles": [device_roles(train, rollout) for _ in range(n)],
            "rollout_batch_id": step,
            "rollout_weights_version": version,
            "num_samples": values["num_samples"].astype(np.int64),
            "tokens": np.rint(values["tokens"]).astype(np.int64),
            "response_len_mean": values["resp_mean"],
            "response_len_p50": values["resp_mean"],
            "response_len_p99": values["resp_max"],
            "response_len_max": values["resp_max"],
        }
    )
    return columns, gaps


def _note_validation(
    testing: np.ndarray, saving: np.ndarray, trainer: VerlTrainer, notes: list[str]
) -> None:
    where = (
        "inside veRL's step timer: taken out of the step (not training) and placed between steps"
        if trainer is VerlTrainer.COLOCATED
        else "timed after veRL's step timer: placed between steps"
    )
    parts = [
        f"{label} {seconds.sum():.1f} s in {int((seconds > 0).sum())} steps ({key})"
        for label, key, seconds in (
            ("validation", TESTING, testing),
            ("checkpoint saving", SAVE_CHECKPOINT, saving),
        )
        if seconds.any()
    ]
    if parts:
        notes.append(f"{'; '.join(parts)}: {where}; no cost model is fitted to it")
    elif trainer is VerlTrainer.COLOCATED:
        notes.append("time outside timing_s/step, if any, is not in the log: steps are abutted")


def _colocated(values: dict, n: int, notes: list[str]) -> dict:
    notes.append(
        "train_s = timing_s/step - timing_s/gen - timing_s/update_weights - validation - "
        "checkpointing (reward, log-prob, advantage and update stages together); idle "
        "GPU-seconds are 0: colocated GPUs take both roles in turn, and train_gpus = "
        "rollout_gpus = all GPUs"
    )
    return {
        "rollout_s": values[GEN],
        "sync_s": _zero_nan(values[UPDATE_WEIGHTS]),
        "idle_train_gpu_s": np.zeros(n),
        "idle_rollout_gpu_s": np.zeros(n),
    }


def _one_step_off(
    values: dict, step: np.ndarray, train_s: np.ndarray, train: int, rollout: int, notes: list
) -> dict:
    gen_s = values[GEN]
    generate_async = values[GENERATE_ASYNC]
    missing = np.isnan(generate_async)
    rollout_s = np.where(missing, gen_s, generate_async)
    if missing.any():
        notes.append(
            f"{int(missing.sum())} steps lack timing_s/generate_async: their rollout_s is "
            "timing_s/gen, only the part of generation the trainer waited for (a lower bound)"
        )
    next_rollout = np.append(rollout_s[1:], 0.0)
    consecutive = np.append(np.diff(step) == 1, True)
    overlap = np.where(consecutive, next_rollout, np.minimum(rollout_s, train_s))
    notes.append(
        "train_s = timing_s/step - timing_s/gen (waiting) - timing_s/sync_rollout_weights; "
        "idle training GPU-seconds = wait x train_gpus; idle rollout GPU-seconds = "
        "max(0, train_s - next batch's generation) x rollout_gpus"
    )
    return {
        "rollout_s": rollout_s,
        "sync_s": values[SYNC_ROLLOUT_WEIGHTS],
        "idle_train_gpu_s": gen_s * train,
        "idle_rollout_gpu_s": np.clip(train_s - overlap, 0, None) * rollout,
    }


def _fully_async(
    values: dict,
    step_s: np.ndarray,
    train_s: np.ndarray,
    train: int,
    rollout: int,
    notes: list[str],
) -> dict:
    wait_s = values[GEN]
    sync_s = _zero_nan(values[PARAM_SYNC])
    trainer_idle = values["trainer_idle_ratio"]
    rollouter_idle = values["rollouter_idle_ratio"]
    logged_trainer = ~np.isnan(trainer_idle)
    logged_rollouter = ~np.isnan(rollouter_idle)
    idle_train = np.where(logged_trainer, trainer_idle * step_s, wait_s) * train
    busy_rollout = np.where(logged_rollouter, (1 - rollouter_idle) * step_s, wait_s)
    idle_rollout = np.where(
        logged_rollouter,
        rollouter_idle * step_s,
        np.clip(step_s - sync_s - busy_rollout, 0, None),
    )
    notes.append(
        "fully-async trainer: train_s = timing_s/step - timing_s/gen (waiting for samples) - "
        "timing_s/param_sync - timing_s/wait_for_enough_samples; sync_s = timing_s/param_sync; "
        f"idle training GPU-seconds from the trainer's idle ratio ({int(logged_trainer.sum())} "
        "steps; else the wait) x train_gpus"
    )
    if logged_rollouter.all():
        notes.append(
            "rollout_s = (1 - the rollouter's idle ratio) x timing_s/step, its busy time per "
            "weight version; idle rollout GPU-seconds = the idle ratio x timing_s/step x "
            "rollout_gpus"
        )
    else:
        notes.append(
            f"{int((~logged_rollouter).sum())} steps lack the rollouter's idle ratio: their "
            "rollout_s is timing_s/gen, the trainer's wait for samples (a lower bound of "
            "generation, as in any fully asynchronous log)"
        )
    if not np.isnan(values[WAIT_FOR_SAMPLES]).all():
        lent = _zero_nan(values[WAIT_FOR_SAMPLES])
        notes.append(
            f"dynamic resource scheduling: trainer GPUs generated for {lent.sum():.1f} s "
            "(timing_s/wait_for_enough_samples), counted neither as training nor as idle; "
            "veRL logs its activation and deactivation inside timing_s/param_sync and "
            "timing_s/step, not apart, so they are not resize records"
        )
    return {
        "rollout_s": busy_rollout,
        "sync_s": sync_s,
        "idle_train_gpu_s": idle_train,
        "idle_rollout_gpu_s": idle_rollout * rollout,
    }


def _separate_async(values: dict, train_s: np.ndarray, train: int, notes: list[str]) -> dict:
    wait_s = _zero_nan(values[GEN])
    switches = sum(
        int((_zero_nan(values[k]) > 0).sum()) for k in (SWITCH_TO_ROLLOUT, SWITCH_TO_TRAINER)
    )
    notes.append(
        "separate-async trainer: train_s = timing_s/step - timing_s/gen - "
        "timing_s/update_weights - timing_s/switch_wait - timing_s/switch_to_rollout - "
        "timing_s/switch_to_trainer; rollout_s = timing_s/gen, the trainer's wait for samples "
        "(a lower bound of generation); idle rollout GPU-seconds are not logged (0); "
        f"{switches} measured switches of the trainer GPUs are resize records"
    )
    return {
        "rollout_s": wait_s,
        "sync_s": _zero_nan(values[UPDATE_WEIGHTS]),
        "idle_train_gpu_s": wait_s * train,
        "idle_rollout_gpu_s": np.zeros(len(train_s)),
    }
