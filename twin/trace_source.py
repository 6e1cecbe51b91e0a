"""Opening a trace given on the command line, whatever its format.

A user's `--trace` may be one of the project's own traces (Parquet directory, JSONL) or a foreign
log that an importer understands (verl's file logger, a CSV export). The importers' `import_trace`
detects which; this module is the one place the analysis commands go through, so they all accept
the same inputs and report the same notes about what was inferred.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from dynaresize.config_io import ConfigError

from ..policies.types import Allocation
from ..traces.importers import (
    ImportOptions,
    TraceFormat,
    detect_format,
    import_trace,
    sidecar_options,
    sidecar_path,
)
from ..traces.io import Trace
from ..traces.kept_lengths import StreamedSamples
from ..traces.workload import Workload
from ..traces.workload_inference import infer_workload
from ..traces.workload_inference import workload_samples as workload_samples  # the inverse
from ..traces.workload_stream import WorkloadStream
from .run_facts import RunFacts


def open_trace(
    path: str | os.PathLike,
    *,
    lenient: bool = False,
    facts: RunFacts | None = None,
    config_split: Allocation | None = None,
    config_name: str | os.PathLike | None = None,
    samples_as_lengths: bool = False,
) -> Trace:
    """The trace at `path`, imported from a foreign format when needed (raises TraceError).

    A foreign log's run facts come from, in order: `facts` (the user's flags), its sidecar file,
    and for the split `config_split` (the initial split of the config `config_name`); what none
    of them says the importer infers or assumes and notes. A GPU count the log contradicts is
    refused naming the log and the input that gave the count. `samples_as_lengths` reads a
    native trace's samples into their lengths alone (`Trace.sample_lengths`: what
    `trace_workload` needs, a block at a time)."""
    location = Path(path)
    if not location.exists():
        raise FileNotFoundError(2, "no such trace", str(location))
    trace = _open(
        location,
        lenient=lenient,
        facts=facts or RunFacts(),
        config_split=config_split,
        config_name=config_name,
        samples_as_lengths=samples_as_lengths,
    )
    check_replayable(trace)
    return trace


def _open(
    location: Path,
    *,
    lenient: bool,
    facts: RunFacts,
    config_split: Allocation | None,
    config_name: str | os.PathLike | None,
    samples_as_lengths: bool = False,
) -> Trace:
    if detect_format(location) is TraceFormat.NATIVE:
        return import_trace(location, lenient=lenient, samples_as_lengths=samples_as_lengths)
    sidecar = sidecar_options(location)
    options = facts.import_options(sidecar)
    said: list[str] = []
    if sidecar is not None:
        said.append(f"{location.name}.import.json")
    if options is not sidecar:
        said.append("the command's flags")
    has_split = options is not None and bool(options.train_gpus and options.rollout_gpus)
    split_from_config = config_split is not None and not has_split
    if config_split is not None and not has_split:
        options = (options or ImportOptions()).model_copy(
            update={
                "train_gpus": config_split.train_gpus,
                "rollout_gpus": config_split.rollout_gpus,
            }
        )
        said.append("the config's initial_allocation (the split)")
    if not said:
        return import_trace(location, lenient=lenient)
    count_from = _gpu_count_source(
        location, facts, sidecar, config_name if split_from_config else None
    )
    trace = import_trace(location, options=options, lenient=lenient, facts_source=count_from)
    note = f"run facts (GPU split, batch size, model) from {' and '.join(said)}"
    trace.meta = trace.meta.model_copy(update={"notes": [note, *trace.meta.notes]})
    return trace


def _gpu_count_source(
    location: Path,
    facts: RunFacts,
    sidecar: ImportOptions | None,
    config_name: str | os.PathLike | None,
) -> str:
    """Which input gave the GPU count the importer checks against the log (the flags' split,
    else the sidecar's num_gpus or split, else the config's split), by the name the user gave."""
    if facts.has_split:
        return "the flags --train-gpus and --rollout-gpus"
    if sidecar is not None and (
        sidecar.num_gpus is not None or (sidecar.train_gpus and sidecar.rollout_gpus)
    ):
        return f"the sidecar {sidecar_path(location)}"
    if config_name is not None:
        return f"cluster.initial_allocation of the config {config_name}"
    return "the config's cluster.initial_allocation"


def trace_notes(trace: Trace) -> list[str]:
    """What the producer or importer inferred, and what rows lenient reading skipped."""
    notes = list(trace.meta.notes)
    if trace.skipped:
        notes.append(trace.skipped_summary())
    return notes


MAX_WORKLOAD_SAMPLES = 100_000_000
"""Samples a replayed workload may hold whole (two int64 lengths each: 1.6 GB at the limit)."""
MAX_STREAMED_SAMPLES = 1_000_000_000
"""Samples a replay may read a block at a time from a clean samples file (`WorkloadStream`):
what it holds of them grows with the steps only (about 16 bytes a step), not the samples."""
MAX_DURATION_S = 1e9
"""A recorded duration over this (about 32 years) is not a measurement of a training run."""
_DURATION_FIELDS = ("step_s", "rollout_s", "train_s", "sync_s")


def check_replayable(trace: Trace, *, held: bool | None = None, why: str = "") -> None:
    """Refuse, in one line naming the step and field, what no analysis can use: durations
    beyond any run (1e308 s overflows every sum and fit) and more samples than memory holds.
    Checked before anything is allocated for them. `held` says whether the samples are to be
    held whole (default: unless the trace's samples can be streamed, `streams_samples`); `why`
    says, in the refusal, what needs them whole."""
    steps = trace.steps
    for name in _DURATION_FIELDS:
        values = steps[name].to_numpy(np.float64)
        bad = np.flatnonzero(~(values <= MAX_DURATION_S))
        if len(bad):
            k = int(bad[0])
            raise ConfigError(
                f"{_where(trace)}step {int(steps['step'].iloc[k])}: {name} {values[k]:g} s is "
                f"beyond any run (over {MAX_DURATION_S:g} s)"
            )
    if held is None:
        held = not streams_samples(trace)
    limit = MAX_WORKLOAD_SAMPLES if held else MAX_STREAMED_SAMPLES
    total = float(steps["num_samples"].to_numpy(np.float64).sum()) if len(steps) else 0.0
    if total > limit:
        k = int(np.argmax(steps["num_samples"].to_numpy(np.int64)))
        what = "hold" if held else "read"
        raise ConfigError(
            f"{_where(trace)}the steps hold {total:,.0f} samples (step "
            f"{int(steps['step'].iloc[k])}: "
            f"{int(steps['num_samples'].iloc[k]):,}), more than a replay can {what} "
            f"({limit:,}){why}"
        )


def streams_samples(trace: Trace) -> bool:
    """Whether the trace's samples are left in a clean file, one run of rows for each of its
    steps (in order), so that a replay can read them a block of steps at a time."""
    lengths = trace.sample_lengths
    if not isinstance(lengths, StreamedSamples):
        return False
    steps = trace.steps["step"].to_numpy(np.int64)
    return bool(np.array_equal(lengths.step_ids, steps))


def _where(trace: Trace) -> str:
    return f"{trace.meta.source_path}: " if trace.meta.source_path else ""


def trace_workload_source(trace: Trace) -> tuple[Workload | WorkloadStream, list[str]]:
    """`trace_workload`, or the trace's samples file as a `WorkloadStream` where every step's
    samples are there, clean and in order (`streams_samples`): nothing is then inferred and
    nothing per sample is held."""
    if streams_samples(trace):
        check_replayable(trace, held=False)
        assert isinstance(trace.sample_lengths, StreamedSamples)
        return replace(trace.sample_lengths.stream, name=_trace_name(trace)), []
    return trace_workload(trace)


def trace_workload(trace: Trace) -> tuple[Workload, list[str]]:
    """The trace's per-sample workload and what had to be inferred for it, computed once.

    When every step has sample records (and no sample belongs to a step the trace lacks), the
    workload is assembled column-wise; otherwise the traces package's inference fills the gaps
    and says how.
    """
    check_replayable(trace, held=True)
    steps = trace.steps["step"].to_numpy(np.int64)
    lengths = trace.sample_lengths.held() if trace.sample_lengths is not None else None
    if lengths is not None:
        ordered = len(steps) and np.all(np.diff(steps) > 0)
        held = lengths.workload_for(steps, name=_trace_name(trace)) if ordered else None
        if held is not None:
            return held, []
    samples = trace.sample_frame()
    if len(samples) and len(steps) and np.all(np.diff(steps) > 0):
        sample_step = samples["step"].to_numpy(np.int64)
        order = np.lexsort((samples["sample_index"].to_numpy(np.int64), sample_step))
        sorted_steps = sample_step[order]
        lo = np.searchsorted(sorted_steps, steps, side="left")
        hi = np.searchsorted(sorted_steps, steps, side="right")
        if np.all(hi > lo) and int((hi - lo).sum()) == len(sample_step):
            workload = Workload(
                samples["prompt_tokens"].to_numpy(np.int64)[order],
                samples["response_tokens"].to_numpy(np.int64)[order],
                np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.int64),
                name=_trace_name(trace),
            )
            return workload, []
    inferred = infer_workload(trace.steps, samples, name=_trace_name(trace))
    return inferred.workload, inferred.notes


def _trace_name(trace: Trace) -> str:
    meta = trace.meta
    return Path(meta.source_path).stem if meta.source_path else meta.source
