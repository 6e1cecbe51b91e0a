"""Importer for verl's file logger: one `{"step": N, "data": {...}}` object per line.

verl writes the same metric names in every trainer, but a name does not measure the same thing in
every trainer. The trainers told apart here (docs/importers.md has the full table):

- colocated (hybrid engine, `RayPPOTrainer`): each step generates, then trains, on the same GPUs.
  `timing_s/gen` is the whole generation of this step's batch; `timing_s/update_weights`, where
  logged, is pushing the updated weights into the rollout engine; validation and checkpoint
  saving (`timing_s/testing`, `timing_s/save_checkpoint`) run inside the step timer and are taken
  out of it; everything else in `timing_s/step` is the training stage.
- one-step-off (`OneStepOffRayTrainer`): rollout GPUs generate batch k+1 while the trainers train
  on batch k. `timing_s/gen` is only how long the trainer *waited*; the generation's own wall time
  is `timing_s/generate_async`; `timing_s/sync_rollout_weights` is the weight broadcast.
- fully-async and separate-async (`verl_keys.VerlTrainer`): rollout streams samples; the trainer's
  `timing_s/gen` is its wait for them, idle ratios say how long each side sat idle, and the
  separate-async trainer's measured switches of its GPUs become resize records.

The trainer is detected from the keys unless the caller says the pipeline mode. verl's step
numbers start at 1; trace step = verl step - 1. Lines without `timing_s/step` that share a step
number with a training line (the fully-async trainer logs its weight sync and the rollouter's
figures that way) add their keys to it. Every metric not stored verbatim in a step field is kept
in the extras table.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import TraceError
from ..io import Trace
from ..schema import StepRecord
from ..validation import validate_frame
from .common import (
    BadValue,
    ImportOptions,
    LineProblems,
    extras_frame,
    has_non_finite,
    imported_meta,
    split_gpus,
    steps_frame,
)
from .verl_keys import (
    COMMON_VERBATIM,
    VERBATIM_KEYS,
    VerlTrainer,
    detect_trainer,
    missing_keys,
    required_keys,
    row_values,
)
from .verl_steps import DERIVED_FROM, step_columns
from .verl_switches import controller_decisions, switch_records


@dataclass
class _VerlRow:
    line: int
    verl_step: int
    data: dict


def looks_like_verl(first_object: dict) -> bool:
    """True for a parsed first line of a verl file-logger JSONL."""
    return set(first_object) >= {"step", "data"} and isinstance(first_object.get("data"), dict)


def import_verl(
    path: str | Path,
    *,
    options: ImportOptions | None = None,
    lenient: bool = False,
    facts_source: str = "the run facts",
) -> Trace:
    """Read a verl file-logger JSONL into a trace; its notes list everything inferred.

    `facts_source` names where `options` came from (a sidecar file, command-line flags) for an
    error when they contradict the log."""
    path = Path(path)
    source = str(path)
    options = options or ImportOptions()
    problems = LineProblems(source, lenient)
    rows, num_untimed, num_merged = _read_rows(path, problems)
    if not rows:
        detail = f" ({num_untimed} records without timing_s/step)" if num_untimed else ""
        raise TraceError(f"no training steps in the verl log{detail}", source=source)
    trainer = detect_trainer([r.data for r in rows], options, source=source)
    notes = [
        f"imported from verl's file logger ({trainer.value} trainer, "
        f"{trainer.pipeline_mode.value} pipeline"
        + (", detected from its keys)" if options.pipeline_mode is None else ", as told)"),
        "trace step = verl step - 1; start_s/end_s are the running sum of timing_s/step",
        "response_len_p50 and response_len_p99 are not logged by verl: set to the mean and the "
        "max response length",
    ]
    if num_merged:
        notes.append(
            f"{num_merged} lines without timing_s/step share a step number with a training line "
            "(weight sync, rollouter figures): their keys were added to that step"
        )
    if num_untimed:
        notes.append(
            f"{num_untimed} records without timing_s/step (validation before training, or "
            "metrics logged between steps) were left out"
        )
    rows = _with_required_keys(rows, trainer, options, problems)
    values = _extract(rows, trainer, options, problems)
    kept = values.pop("rows")
    if not kept:
        raise TraceError("no training line of the verl log is usable", source=source)
    inferred = _inferred_gpu_count(values)
    total, train, rollout = split_gpus(
        options, inferred, colocated=trainer is VerlTrainer.COLOCATED, notes=notes
    )
    _check_gpu_facts(values, kept, options, source=source, facts_source=facts_source)
    _note_batch(values, options, notes)
    columns, gaps = step_columns(
        values, np.array([r.verl_step for r in kept]), trainer, (train, rollout), notes
    )
    steps = _checked_steps(columns, gaps, [r.line for r in kept], source=source)
    extras = _extras(kept, trainer, notes)
    trace = Trace(
        meta=imported_meta(
            options,
            source="verl",
            importer="verl",
            path=source,
            mode=trainer.pipeline_mode,
            gpus=(total, train, rollout),
            notes=notes,
        ),
        steps=steps,
        extras=extras,
        skipped=problems.skipped,
    )
    if trainer is VerlTrainer.SEPARATE_ASYNC:
        trace.resizes = switch_records(values, steps)
        trace.decisions = controller_decisions(values, steps)
    return trace.validated(source=source)


def _read_rows(path: Path, problems: LineProblems) -> tuple[list[_VerlRow], int, int]:
    """Training lines in order; untimed lines sharing a training line's step number merged into
    it. Returns the rows, the count of untimed lines left out and of those merged."""
    rows: list[_VerlRow] = []
    untimed: list[_VerlRow] = []
    seen_any = False
    last_step: int | None = None
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            seen_any = True
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
                problems.fail(line_no, None, f"malformed JSON ({getattr(err, 'msg', err)})")
                continue
            if not isinstance(obj, dict) or not looks_like_verl(obj):
                problems.fail(line_no, None, 'expected {"step": N, "data": {...}}')
                continue
            step = obj["step"]
            if isinstance(step, bool) or not isinstance(step, int) or step < 0:
                problems.fail(line_no, "step", f"expected a non-negative integer, got {step!r:.40}")
                continue
            if "timing_s/step" not in obj["data"]:
                untimed.append(_VerlRow(line_no, step, obj["data"]))
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
    by_step = {row.verl_step: row for row in rows}
    merged = 0
    for extra in untimed:
        row = by_step.get(extra.verl_step)
        if row is None:
            continue
        row.data = {**extra.data, **row.data}
        merged += 1
    return rows, len(untimed) - merged, merged


def _with_required_keys(
    rows: list[_VerlRow], trainer: VerlTrainer, options: ImportOptions, problems: LineProblems
) -> list[_VerlRow]:
    """Rows holding every key the trainer's log must have. Strict reading names every missing
    key at once, each with the first line that lacks it."""
    required = required_keys(trainer, options)
    lacking = [(row, missing_keys(row.data, required, options)) for row in rows]
    if not any(missing for _, missing in lacking):
        return rows
    if not problems.lenient:
        first_line: dict[str, int] = {}
        count: dict[str, int] = {}
        for row, missing in lacking:
            for key in missing:
                first_line.setdefault(key, row.line)
                count[key] = count.get(key, 0) + 1
        if len(first_line) == 1:
            (key,) = first_line
            more = f" (and on {count[key] - 1} more lines)" if count[key] > 1 else ""
            raise TraceError(
                f"missing (required){more}",
                source=problems.source,
                line=first_line[key],
                field=key,
            )
        listed = ", ".join(
            f"{key} (line {first_line[key]}"
            + (f" and {count[key] - 1} more" if count[key] > 1 else "")
            + ")"
            for key in sorted(first_line, key=lambda k: (first_line[k], k))
        )
        raise TraceError(
            f"missing required keys of veRL's {trainer.value} trainer: {listed}",
            source=problems.source,
            line=min(first_line.values()),
        )
    kept = []
    for row, missing in lacking:
        if missing:
            problems.fail(row.line, missing[0], f"missing required keys: {', '.join(missing)}")
        else:
            kept.append(row)
    return kept


def _extract(
    rows: list[_VerlRow], trainer: VerlTrainer, options: ImportOptions, problems: LineProblems
) -> dict:
    """Per-row numbers, each checked; a bad row is reported (strict) or dropped (lenient)."""
    kept: list[_VerlRow] = []
    found: list[dict[str, float]] = []
    for row in rows:
        try:
            found.append(row_values(row.data, trainer, options))
        except BadValue as bad:
            problems.fail(row.line, bad.key, bad.reason)
            continue
        kept.append(row)
    keys = found[0].keys() if found else ()
    result: dict = {k: np.array([v[k] for v in found], dtype=float) for k in keys}
    result["rows"] = kept
    return result


def _inferred_gpu_count(values: dict) -> int | None:
    """verl's perf/throughput is tokens / (step time x all GPUs of the run), so the GPU count is
    recoverable; None unless every step that logged it agrees after rounding."""
    implied = values["gpus_implied"][np.isfinite(values["gpus_implied"])]
    if len(implied) == 0:
        return None
    counts = np.rint(implied).astype(np.int64)
    if counts.min() != counts.max() or counts[0] <= 0:
        return None
    return int(counts[0])


def _check_gpu_facts(
    values: dict,
    rows: list[_VerlRow],
    options: ImportOptions,
    *,
    source: str,
    facts_source: str,
) -> None:
    """Refuse run facts whose GPU count perf/throughput contradicts on every line that logs it."""
    given, spelled = _given_total(options)
    if given is None:
        return
    implied = values["gpus_implied"]
    logged = np.isfinite(implied)
    if not logged.any():
        return
    counts = np.rint(implied[logged]).astype(np.int64)
    if counts.min() != counts.max() or counts[0] == given:
        return
    line = rows[int(np.flatnonzero(logged)[0])].line
    raise TraceError(
        f"{spelled} = {given} GPUs (from {facts_source}), but perf/throughput implies "
        f"{counts[0]} on every line of {Path(source).name} (perf/total_num_tokens / "
        f"(perf/throughput x perf/time_per_step), first at line {line}): correct the GPU count "
        f"in {facts_source}",
        source=source,
        line=line,
        field="perf/throughput",
    )


def _given_total(options: ImportOptions) -> tuple[int | None, str]:
    if options.num_gpus is not None:
        return options.num_gpus, "num_gpus"
    if options.train_gpus and options.rollout_gpus:
        return options.train_gpus + options.rollout_gpus, "train_gpus + rollout_gpus"
    return None, ""


def _note_batch(values: dict, options: ImportOptions, notes: list[str]) -> None:
    if options.num_samples_per_step is None:
        notes.append(
            "num_samples inferred as perf/total_num_tokens / (prompt_length/mean + "
            "response_length/mean)"
        )
    if not values["logged"].all():
        notes.append("tokens inferred as num_samples x (prompt_length/mean + response_length/mean)")


def _checked_steps(columns: dict, gaps: np.ndarray, lines: list[int], *, source: str):
    """The steps table; a derived value the schema refuses is reported at the log's own line
    and under the log key it came from."""
    frame = steps_frame(columns, source=source, gap_after_s=gaps, check=False)
    try:
        return validate_frame(
            frame,
            StepRecord,
            table="steps",
            source=source,
            unit="line",
            positions=np.asarray(lines),
        )
    except TraceError as err:
        key = DERIVED_FROM.get(err.field or "", err.field)
        raise TraceError(
            f"{err.reason} (derived step field {err.field})" if key != err.field else err.reason,
            source=source,
            line=err.line,
            field=key,
        ) from None


def _extras(rows: list[_VerlRow], trainer: VerlTrainer, notes: list[str]) -> pd.DataFrame:
    verbatim = VERBATIM_KEYS[trainer] | COMMON_VERBATIM
    kept = []
    non_finite = 0
    for row in rows:
        for key, value in row.data.items():
            if key in verbatim:
                continue
            if type(value) is not float or not math.isfinite(value):
                non_finite += has_non_finite(value)
            kept.append((row.verl_step - 1, key, value))
    if non_finite:
        notes.append(
            f"{non_finite} metrics of the extras table were NaN or infinite: kept as JSON null"
        )
    return extras_frame(kept)
