"""Importer for verl's file logger: one `{"step": N, "data": {...}}` object per line.

verl writes the same metric names in every trainer, but a name does not measure the same thing in
every trainer. The two kinds of runs told apart here (docs/importers.md has the full table):

- colocated (hybrid engine, `RayPPOTrainer`): each step generates, then trains, on the same GPUs.
  `timing_s/gen` is the whole generation of this step's batch (including putting the rollout
  engine to sleep afterwards); `timing_s/update_weights`, where logged, is pushing the updated
  weights into the rollout engine; everything else in `timing_s/step` (reward, old_log_prob,
  ref, values, adv, update_critic, update_actor, untimed glue) is the training stage.
- one-step-off (`OneStepOffRayTrainer`): rollout GPUs generate batch k+1 while the trainers train
  on batch k. `timing_s/gen` is only how long the trainer *waited* for the batch that was already
  being generated (zero when rollout kept up); the generation's own wall time is
  `timing_s/generate_async`; `timing_s/sync_rollout_weights` is the NCCL weight broadcast plus the
  KV-cache reset, and nothing generates meanwhile.

The mode is detected from the keys (`timing_s/sync_rollout_weights` or `timing_s/generate_async`
mean one-step-off) unless the caller says it. verl's step numbers start at 1; trace step = verl
step - 1. Every metric that is not stored verbatim in a step field is kept in the extras table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TraceError
from ..io import Trace
from ..schema import PipelineMode
from .common import (
    BadValue,
    ImportOptions,
    LineProblems,
    device_roles,
    extras_frame,
    imported_meta,
    number,
    required_number,
    split_gpus,
    steps_frame,
)

ONE_STEP_OFF_KEYS = ("timing_s/sync_rollout_weights", "timing_s/generate_async")
"""Keys only the one-step-off trainer writes."""

VERBATIM_KEYS = {
    PipelineMode.COLOCATED: {
        "timing_s/step": "step_s",
        "timing_s/gen": "rollout_s",
        "timing_s/update_weights": "sync_s",
        "perf/total_num_tokens": "tokens",
        "response_length/mean": "response_len_mean",
        "response_length/max": "response_len_max",
    },
    PipelineMode.ONE_STEP_OFF: {
        "timing_s/step": "step_s",
        "timing_s/generate_async": "rollout_s",
        "timing_s/sync_rollout_weights": "sync_s",
        "perf/total_num_tokens": "tokens",
        "response_length/mean": "response_len_mean",
        "response_length/max": "response_len_max",
    },
}
"""verl key -> step field it is copied into unchanged, per mode; all other keys go to extras."""


@dataclass
class _VerlRow:
    line: int
    verl_step: int
    data: dict


def looks_like_verl(first_object: dict) -> bool:
    """True for a parsed first line of a verl file-logger JSONL."""
    return set(first_object) >= {"step", "data"} and isinstance(first_object.get("data"), dict)


def import_verl(
    path: str | Path, *, options: ImportOptions | None = None, lenient: bool = False
) -> Trace:
    """Read a verl file-logger JSONL into a trace; its notes list everything inferred."""
    path = Path(path)
    options = options or ImportOptions()
    problems = LineProblems(str(path), lenient)
    rows, num_untimed = _read_rows(path, problems)
    if not rows:
        detail = f" ({num_untimed} records without timing_s/step)" if num_untimed else ""
        raise TraceError(f"no training steps in the verl log{detail}", source=str(path))
    mode = _mode(rows, options, source=str(path))
    notes = [
        f"imported from verl's file logger ({mode.value} run"
        + (", detected from its keys)" if options.pipeline_mode is None else ", as told)"),
        "trace step = verl step - 1; start_s/end_s are the running sum of timing_s/step",
        "response_len_p50 and response_len_p99 are not logged by verl: set to the mean and the "
        "max response length",
    ]
    if num_untimed:
        notes.append(
            f"{num_untimed} records without timing_s/step (validation before training, or "
            "metrics logged between steps) were left out"
        )
    values = _extract(rows, mode, options, problems)
    total, train, rollout = split_gpus(
        options,
        _inferred_gpu_count(values),
        colocated=mode is PipelineMode.COLOCATED,
        notes=notes,
    )
    columns = _columns(values, mode, train, rollout, options, notes)
    gaps = _untimed_gaps(values["rows"], mode, notes)
    steps = steps_frame(columns, source=str(path), gap_after_s=gaps)
    extras = extras_frame(
        [
            (row.verl_step - 1, key, value)
            for row in values["rows"]
            for key, value in row.data.items()
            if key not in VERBATIM_KEYS[mode]
        ]
    )
    meta = imported_meta(
        options,
        source="verl",
        importer="verl",
        path=str(path),
        mode=mode,
        gpus=(total, train, rollout),
        notes=notes,
    )
    trace = Trace(meta=meta, steps=steps, extras=extras, skipped=problems.skipped)
    return trace.validated(source=str(path))


def _read_rows(path: Path, problems: LineProblems) -> tuple[list[_VerlRow], int]:
    rows: list[_VerlRow] = []
    num_untimed = 0
    seen_any = False
    last_step: int | None = None
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            seen_any = True
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                problems.fail(line_no, None, f"malformed JSON ({getattr(err, 'msg', err)})")
                continue
            if not isinstance(obj, dict) or not looks_like_verl(obj):
                problems.fail(line_no, None, 'expected {"step": N, "data": {...}}')
                continue
            step = obj["step"]
            if isinstance(step, bool) or not isinstance(step, int) or step < 0:
                problems.fail(line_no, "step", f"expected a non-negative integer, got {step!r}")
                continue
            if "timing_s/step" not in obj["data"]:
                num_untimed += 1
                continue
            if step < 1:
                problems.fail(line_no, "step", "training steps in verl start at 1")
                continue
            if last_step is not None and step <= last_step:
                problems.fail(line_no, "step", f"steps out of order: {step} after {last_step}")
                continue
            last_step = step
            rows.append(_VerlRow(line_no, step, obj["data"]))
    if not seen_any:
        raise TraceError("empty file: no records", source=str(path))
    return rows, num_untimed


def _mode(rows: list[_VerlRow], options: ImportOptions, *, source: str) -> PipelineMode:
    if options.pipeline_mode is not None:
        if options.pipeline_mode not in VERBATIM_KEYS:
            raise TraceError(
                f"the verl importer reads colocated and one-step-off runs, not "
                f"{options.pipeline_mode.value}",
                source=source,
            )
        return options.pipeline_mode
    one_step_off = any(key in row.data for row in rows for key in ONE_STEP_OFF_KEYS)
    return PipelineMode.ONE_STEP_OFF if one_step_off else PipelineMode.COLOCATED


def _extract(
    rows: list[_VerlRow], mode: PipelineMode, options: ImportOptions, problems: LineProblems
) -> dict:
    """Per-row numbers, each checked; a bad row is reported (strict) or dropped (lenient)."""
    kept: list[_VerlRow] = []
    out: dict[str, list[float]] = {k: [] for k in _FIELDS}
    for row in rows:
        try:
            values = _row_values(row.data, mode, options)
        except BadValue as bad:
            problems.fail(row.line, bad.key, bad.reason)
            continue
        kept.append(row)
        for key in _FIELDS:
            out[key].append(values[key])
    result: dict = {k: np.asarray(v, dtype=float) for k, v in out.items()}
    result["rows"] = kept
    return result


_FIELDS = (
    "step_s",
    "gen_s",
    "generate_async_s",
    "sync_s",
    "tokens",
    "num_samples",
    "resp_mean",
    "resp_max",
    "gpus_implied",
    "tokens_logged",
)


def _row_values(data: dict, mode: PipelineMode, options: ImportOptions) -> dict:
    step_s = required_number(data, "timing_s/step")
    gen_s = required_number(data, "timing_s/gen")
    if mode is PipelineMode.ONE_STEP_OFF:
        sync_s = required_number(data, "timing_s/sync_rollout_weights")
        generate_async_s = number(data, "timing_s/generate_async", required=False)
    else:
        sync_s = number(data, "timing_s/update_weights", required=False) or 0.0
        generate_async_s = None
    resp_mean = required_number(data, "response_length/mean")
    resp_max = required_number(data, "response_length/max")
    if resp_max < resp_mean:
        raise BadValue("response_length/max", f"{resp_max} is below the mean {resp_mean}")
    if options.num_samples_per_step is None:
        tokens = required_number(data, "perf/total_num_tokens")
        tokens_logged = True
        per_sample = required_number(data, "prompt_length/mean") + resp_mean
        if per_sample <= 0:
            raise BadValue(
                "response_length/mean", "zero mean lengths: the batch size is unknowable"
            )
        num_samples = round(tokens / per_sample)
    else:
        num_samples = options.num_samples_per_step
        logged_tokens = number(data, "perf/total_num_tokens", required=False)
        tokens_logged = logged_tokens is not None
        if logged_tokens is None:
            prompt_mean = number(data, "prompt_length/mean", required=False)
            if prompt_mean is None:
                raise BadValue("prompt_length/mean", "missing; needed to infer total tokens")
            tokens = float(round(num_samples * (prompt_mean + resp_mean)))
        else:
            tokens = logged_tokens
    for key in GAP_KEYS:
        number(data, key, required=False)  # a bad value names its line here
    throughput = number(data, "perf/throughput", required=False)
    time_per_step = number(data, "perf/time_per_step", required=False) or step_s
    gpus_implied = tokens / (throughput * time_per_step) if throughput and time_per_step else np.nan
    return {
        "step_s": step_s,
        "gen_s": gen_s,
        "generate_async_s": np.nan if generate_async_s is None else generate_async_s,
        "sync_s": sync_s,
        "tokens": tokens,
        "num_samples": num_samples,
        "resp_mean": resp_mean,
        "resp_max": resp_max,
        "gpus_implied": gpus_implied,
        "tokens_logged": float(tokens_logged),
    }


GAP_KEYS = ("timing_s/testing", "timing_s/save_checkpoint")
"""Work the one-step-off trainer times after its step timer has stopped."""


def _untimed_gaps(rows: list[_VerlRow], mode: PipelineMode, notes: list[str]) -> np.ndarray:
    """Seconds between one step's end and the next one's start that the log accounts for."""
    if mode is not PipelineMode.ONE_STEP_OFF:
        notes.append("time outside timing_s/step, if any, is not in the log: steps are abutted")
        return np.zeros(len(rows))
    gaps = np.array(
        [sum(_gap_value(row.data, key) for key in GAP_KEYS) for row in rows], dtype=float
    )
    notes.append(
        "one-step-off validation and checkpointing run after the step timer: "
        "timing_s/testing and timing_s/save_checkpoint are added between steps"
        + (f" ({gaps.sum():.1f} s in all)" if gaps.any() else " (none logged)")
    )
    return gaps


def _gap_value(data: dict, key: str) -> float:
    return number(data, key, required=False) or 0.0  # already checked by _row_values


def _inferred_gpu_count(values: dict) -> int | None:
    """verl's perf/throughput is tokens / (step time x all GPUs of the run), so the GPU count is
    recoverable; None unless every step that logged it agrees after rounding."""
    implied = values["gpus_implied"][np.isfinite(values["gpus_implied"])]
    if len(implied) == 0:
        return None
    counts = np.rint(implied).astype(int)
    if counts.min() != counts.max() or counts[0] <= 0:
        return None
    return int(counts[0])


def _columns(
    values: dict,
    mode: PipelineMode,
    train: int,
    rollout: int,
    options: ImportOptions,
    notes: list[str],
) -> dict:
    rows = values["rows"]
    n = len(rows)
    step = np.array([row.verl_step - 1 for row in rows], dtype=np.int64)
    step_s, gen_s, sync_s = values["step_s"], values["gen_s"], values["sync_s"]
    if options.num_samples_per_step is None:
        notes.append(
            "num_samples inferred as perf/total_num_tokens / (prompt_length/mean + "
            "response_length/mean)"
        )
    if not values["tokens_logged"].all():
        notes.append("tokens inferred as num_samples x (prompt_length/mean + response_length/mean)")
    if mode is PipelineMode.COLOCATED:
        rollout_s = gen_s
        train_raw = step_s - gen_s - sync_s
        idle_train = idle_rollout = np.zeros(n)
        version = step.copy()
        notes.append(
            "train_s = timing_s/step - timing_s/gen - timing_s/update_weights (reward, log-prob, "
            "advantage and update stages together); idle GPU-seconds are 0: colocated GPUs "
            "take both roles in turn, and train_gpus = rollout_gpus = all GPUs"
        )
    else:
        generate_async = values["generate_async_s"]
        missing = np.isnan(generate_async)
        rollout_s = np.where(missing, gen_s, generate_async)
        if missing.any():
            notes.append(
                f"{int(missing.sum())} steps lack timing_s/generate_async: their rollout_s is "
                "timing_s/gen, only the part of generation the trainer waited for (a lower bound)"
            )
        train_raw = step_s - gen_s - sync_s
        train_s = np.clip(train_raw, 0, None)
        idle_train = gen_s * train
        next_rollout = np.append(rollout_s[1:], 0.0)
        consecutive = np.append(np.diff(step) == 1, True)
        overlap = np.where(consecutive, next_rollout, np.minimum(rollout_s, train_s))
        idle_rollout = np.clip(train_s - overlap, 0, None) * rollout
        version = np.maximum(step - 1, 0)
        notes.append(
            "train_s = timing_s/step - timing_s/gen (waiting) - timing_s/sync_rollout_weights; "
            "idle training GPU-seconds = wait x train_gpus; idle rollout GPU-seconds = "
            "max(0, train_s - next batch's generation) x rollout_gpus"
        )
    clipped = int((train_raw < 0).sum())
    if clipped:
        notes.append(f"{clipped} steps had stage timers summing past timing_s/step: train_s set 0")
    return {
        "step": step,
        "step_s": step_s,
        "rollout_s": rollout_s,
        "train_s": np.clip(train_raw, 0, None),
        "sync_s": sync_s,
        "idle_train_gpu_s": idle_train,
        "idle_rollout_gpu_s": idle_rollout,
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
