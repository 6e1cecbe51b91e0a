"""veRL's metric names, which of its trainers writes which, and one log line read into numbers.

veRL writes the same `timing_s/<name>` keys from several trainers, and a key does not measure the
same thing in each (docs/importers.md has the table). This module tells the trainers apart from
the keys a log holds and reads one line's numbers, checking each against the meaning it has in
that trainer; `verl_steps` turns the numbers into step records.
"""

from __future__ import annotations

import math
from enum import Enum

from ..schema import PipelineMode
from .common import BadValue, ImportOptions, number


class VerlTrainer(str, Enum):
    """The veRL trainer that wrote a log."""

    COLOCATED = "colocated"
    """`RayPPOTrainer` with the hybrid engine: every GPU generates, then trains."""
    ONE_STEP_OFF = "one_step_off"
    """`OneStepOffRayTrainer`: rollout GPUs generate batch k+1 while trainers train on batch k."""
    FULLY_ASYNC = "fully_async"
    """The fully asynchronous trainer (optionally with dynamic resource scheduling): rollout
    streams samples into a queue, the trainer takes them and syncs weights every few steps."""
    SEPARATE_ASYNC = "separate_async"
    """The separate-async trainer: standalone rollout GPUs, and trainer GPUs lent to rollout
    between training steps (`timing_s/switch_to_rollout`, `timing_s/switch_to_trainer`)."""

    @property
    def pipeline_mode(self) -> PipelineMode:
        return {
            VerlTrainer.COLOCATED: PipelineMode.COLOCATED,
            VerlTrainer.ONE_STEP_OFF: PipelineMode.ONE_STEP_OFF,
            VerlTrainer.FULLY_ASYNC: PipelineMode.ASYNC,
            VerlTrainer.SEPARATE_ASYNC: PipelineMode.ASYNC,
        }[self]


STEP = "timing_s/step"
GEN = "timing_s/gen"
GENERATE_ASYNC = "timing_s/generate_async"
SYNC_ROLLOUT_WEIGHTS = "timing_s/sync_rollout_weights"
UPDATE_WEIGHTS = "timing_s/update_weights"
PARAM_SYNC = "timing_s/param_sync"
WAIT_FOR_SAMPLES = "timing_s/wait_for_enough_samples"
SWITCH_TO_ROLLOUT = "timing_s/switch_to_rollout"
SWITCH_TO_TRAINER = "timing_s/switch_to_trainer"
SWITCH_WAIT = "timing_s/switch_wait"
TESTING = "timing_s/testing"
SAVE_CHECKPOINT = "timing_s/save_checkpoint"
TOKENS = "perf/total_num_tokens"
THROUGHPUT = "perf/throughput"
TIME_PER_STEP = "perf/time_per_step"
RESPONSE_MEAN = "response_length/mean"
RESPONSE_MAX = "response_length/max"
PROMPT_MEAN = "prompt_length/mean"
TRAINER_IDLE_RATIO = ("fully_async/trainer/idle_ratio", "trainer/idle_ratio")
"""The fully-async trainer's share of a step spent waiting for samples (older veRL: unprefixed)."""
ROLLOUTER_IDLE_RATIO = ("fully_async/rollouter/idle_ratio", "rollouter/idle_ratio")
"""The rollouter's share of a weight version it spent idle (older veRL: unprefixed)."""
SHOULD_SWITCH = "separate_async/decision/should_switch_to_rollout"
"""The separate-async controller's decision at a step's end (1: lend the trainer GPUs)."""

_TRAINER_KEYS: dict[VerlTrainer, tuple[tuple[str, ...], tuple[str, ...]]] = {
    VerlTrainer.SEPARATE_ASYNC: (
        (SWITCH_TO_ROLLOUT, SWITCH_TO_TRAINER, SWITCH_WAIT),
        ("separate_async/",),
    ),
    VerlTrainer.FULLY_ASYNC: (
        (PARAM_SYNC, WAIT_FOR_SAMPLES, *TRAINER_IDLE_RATIO, *ROLLOUTER_IDLE_RATIO),
        ("fully_async/", "dynamic_resource/"),
    ),
    VerlTrainer.ONE_STEP_OFF: ((SYNC_ROLLOUT_WEIGHTS, GENERATE_ASYNC), ()),
}
"""Keys (and key prefixes) only that trainer writes, most specific trainer first."""

REQUIRED_TIMINGS = {
    VerlTrainer.COLOCATED: (STEP, GEN),
    VerlTrainer.ONE_STEP_OFF: (STEP, GEN, SYNC_ROLLOUT_WEIGHTS),
    VerlTrainer.FULLY_ASYNC: (STEP, GEN),
    VerlTrainer.SEPARATE_ASYNC: (STEP,),
}

PARTS_OF_STEP = {
    VerlTrainer.COLOCATED: (GEN, UPDATE_WEIGHTS, TESTING, SAVE_CHECKPOINT),
    VerlTrainer.ONE_STEP_OFF: (GEN, SYNC_ROLLOUT_WEIGHTS),
    VerlTrainer.FULLY_ASYNC: (GEN, PARAM_SYNC, WAIT_FOR_SAMPLES),
    VerlTrainer.SEPARATE_ASYNC: (
        GEN,
        UPDATE_WEIGHTS,
        SWITCH_WAIT,
        SWITCH_TO_ROLLOUT,
        SWITCH_TO_TRAINER,
    ),
}
"""Timers inside veRL's step timer that are not training; the rest of the step is training."""

OUTSIDE_STEP_TIMER = {
    VerlTrainer.COLOCATED: (),
    VerlTrainer.ONE_STEP_OFF: (TESTING, SAVE_CHECKPOINT),
    VerlTrainer.FULLY_ASYNC: (TESTING, SAVE_CHECKPOINT),
    VerlTrainer.SEPARATE_ASYNC: (TESTING, SAVE_CHECKPOINT),
}
"""Validation and checkpoint timers each trainer runs after its step timer has stopped."""

VALIDATION_AND_CHECKPOINT = (TESTING, SAVE_CHECKPOINT)

VERBATIM_KEYS = {
    VerlTrainer.COLOCATED: {STEP, GEN, UPDATE_WEIGHTS},
    VerlTrainer.ONE_STEP_OFF: {STEP, GENERATE_ASYNC, SYNC_ROLLOUT_WEIGHTS},
    VerlTrainer.FULLY_ASYNC: {STEP, PARAM_SYNC},
    VerlTrainer.SEPARATE_ASYNC: {STEP, UPDATE_WEIGHTS},
}
"""Keys copied unchanged into a step field; with the length and token keys, the only ones not
kept in the extras table."""
COMMON_VERBATIM = {TOKENS, RESPONSE_MEAN, RESPONSE_MAX}

ROUNDING_S = 1e-3
"""Timer parts may exceed the step timer by this much (independent clocks, rounding) before the
line counts as contradicting itself."""
MAX_COUNT = 2**53
"""Token and sample counts beyond this cannot be held exactly; no batch is that large."""
MAX_LENGTH_TOKENS = 2**31
"""A response or prompt longer than this is not a length any model generates."""
MAX_DURATION_S = 1e9
"""A timer over this (about 32 years) is not a measurement of a training run."""


def detect_trainer(rows_data: list[dict], options: ImportOptions, *, source: str) -> VerlTrainer:
    """The trainer that wrote the log: as the user says, else from the keys its lines hold."""
    present = _trainers_present(rows_data)
    told = options.pipeline_mode
    if told is None:
        return present[0] if present else VerlTrainer.COLOCATED
    if told is PipelineMode.COLOCATED:
        return VerlTrainer.COLOCATED
    if told is PipelineMode.ONE_STEP_OFF:
        return VerlTrainer.ONE_STEP_OFF
    if told is PipelineMode.ASYNC:
        if VerlTrainer.SEPARATE_ASYNC in present:
            return VerlTrainer.SEPARATE_ASYNC
        return VerlTrainer.FULLY_ASYNC
    from ..errors import TraceError

    raise TraceError(
        f"veRL has no {told.value} trainer: the verl importer reads colocated, one_step_off "
        "and async (fully-async, separate-async) runs",
        source=source,
    )


def _trainers_present(rows_data: list[dict]) -> list[VerlTrainer]:
    keys: set[str] = set()
    for data in rows_data:
        keys.update(data)
    found = []
    for trainer, (exact, prefixes) in _TRAINER_KEYS.items():
        if any(k in keys for k in exact) or any(k.startswith(prefixes) for k in keys):
            found.append(trainer)
    return found


def required_keys(trainer: VerlTrainer, options: ImportOptions) -> tuple[str, ...]:
    """Keys every training line of this trainer's log must have."""
    keys = [*REQUIRED_TIMINGS[trainer], RESPONSE_MEAN, RESPONSE_MAX]
    if options.num_samples_per_step is None:
        keys += [TOKENS, PROMPT_MEAN]
    return tuple(keys)


def missing_keys(data: dict, required: tuple[str, ...], options: ImportOptions) -> list[str]:
    missing = [k for k in required if data.get(k) is None]
    no_tokens = data.get(TOKENS) is None and data.get(PROMPT_MEAN) is None
    if options.num_samples_per_step is not None and no_tokens:
        missing.append(PROMPT_MEAN)
    return missing


def _optional(data: dict, key: str) -> float:
    value = number(data, key, required=False)
    return math.nan if value is None else value


def _first_of(data: dict, keys: tuple[str, ...]) -> tuple[str, float]:
    for key in keys:
        if data.get(key) is not None:
            value = number(data, key, required=False)
            assert value is not None
            if value > 1:
                raise BadValue(key, f"an idle ratio is at most 1, got {value}")
            return key, value
    return keys[0], math.nan


def _count(data: dict, key: str, value: float) -> float:
    if value > MAX_COUNT:
        raise BadValue(key, f"{value:g} is beyond any batch (more than 2^53)")
    return value


def _length(data: dict, key: str) -> float:
    value = number(data, key, required=True)
    assert value is not None
    if value > MAX_LENGTH_TOKENS:
        raise BadValue(key, f"{value:g} tokens is not a length any model generates (over 2^31)")
    return value


def timings(data: dict) -> dict[str, float]:
    """Every `timing_s/*` value of a line, checked to be a finite duration no run could exceed
    (they are kept as JSON either way); BadValue names the first that is not."""
    found = {}
    for key, value in data.items():
        if not key.startswith("timing_s/") or value is None:
            continue
        if type(value) is float and 0.0 <= value <= MAX_DURATION_S:
            found[key] = value  # the common case, without the general checks' cost
            continue
        checked = number(data, key, required=False)
        assert checked is not None
        if checked > MAX_DURATION_S:
            raise BadValue(key, f"{checked:g} s is beyond any run (over {MAX_DURATION_S:g} s)")
        found[key] = checked
    return found


def row_values(data: dict, trainer: VerlTrainer, options: ImportOptions) -> dict[str, float]:
    """One training line's numbers (NaN where an optional key is absent); BadValue names the key
    of the first one that is unusable or contradicts another."""
    timed = timings(data)
    step_s = timed.get(STEP)
    if step_s is None:
        raise BadValue(STEP, "missing (required)")
    if step_s <= 0:
        raise BadValue(STEP, f"must be > 0, got {step_s:g}")
    values = {key: timed.get(key, math.nan) for key in _TIMING_KEYS}
    values[STEP] = step_s
    parts = [k for k in PARTS_OF_STEP[trainer] if not math.isnan(values[k])]
    parts_s = sum(values[k] for k in parts)
    if parts_s > step_s + ROUNDING_S + 1e-6 * step_s:
        named = " + ".join(parts)
        raise BadValue(
            STEP,
            f"{step_s:g} s is below its own parts ({named} = {parts_s:g} s): the line "
            "contradicts itself",
        )
    values["train_s"] = max(0.0, step_s - parts_s)
    values["parts_over_step"] = float(parts_s > step_s)
    _, values["trainer_idle_ratio"] = _first_of(data, TRAINER_IDLE_RATIO)
    _, values["rollouter_idle_ratio"] = _first_of(data, ROLLOUTER_IDLE_RATIO)
    values["should_switch"] = _optional(data, SHOULD_SWITCH)
    resp_mean = _length(data, RESPONSE_MEAN)
    resp_max = _length(data, RESPONSE_MAX)
    if resp_max < resp_mean:
        raise BadValue(RESPONSE_MAX, f"{resp_max:g} is below the mean {resp_mean:g}")
    values.update(_batch(data, resp_mean, options))
    values["resp_mean"], values["resp_max"] = resp_mean, resp_max
    throughput = number(data, THROUGHPUT, required=False)
    time_per_step = number(data, TIME_PER_STEP, required=False) or step_s
    values["gpus_implied"] = (
        values["tokens"] / (throughput * time_per_step) if throughput else math.nan
    )
    return values


_TIMING_KEYS = (
    GEN,
    GENERATE_ASYNC,
    SYNC_ROLLOUT_WEIGHTS,
    UPDATE_WEIGHTS,
    PARAM_SYNC,
    WAIT_FOR_SAMPLES,
    SWITCH_TO_ROLLOUT,
    SWITCH_TO_TRAINER,
    SWITCH_WAIT,
    TESTING,
    SAVE_CHECKPOINT,
)


def _batch(data: dict, resp_mean: float, options: ImportOptions) -> dict[str, float]:
    """Tokens and samples of the batch, logged or inferred from the mean lengths."""
    if options.num_samples_per_step is None:
        tokens = _count(data, TOKENS, number(data, TOKENS, required=True) or 0.0)
        per_sample = _length(data, PROMPT_MEAN) + resp_mean
        if per_sample <= 0:
            raise BadValue(RESPONSE_MEAN, "zero mean lengths: the batch size is unknowable")
        return {"tokens": tokens, "num_samples": float(round(tokens / per_sample)), "logged": 1.0}
    num_samples = float(options.num_samples_per_step)
    logged = number(data, TOKENS, required=False)
    if logged is not None:
        return {"tokens": _count(data, TOKENS, logged), "num_samples": num_samples, "logged": 1.0}
    tokens = float(round(num_samples * (_length(data, PROMPT_MEAN) + resp_mean)))
    return {"tokens": _count(data, PROMPT_MEAN, tokens), "num_samples": num_samples, "logged": 0.0}
