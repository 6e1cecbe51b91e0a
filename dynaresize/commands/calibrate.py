"""`dynaresize calibrate`: fit the twin's stage costs to measured traces and write costs.yaml."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml

from dynaresize.commands import facts as flags
from dynaresize.commands.guard import user_errors


def register(app: typer.Typer) -> None:
    app.command(
        "calibrate",
        help="Fit rollout, training, weight-sync and resize-phase costs to traces; write a "
        "--costs YAML file.",
    )(calibrate)


def calibrate(
    trace: list[Path] = typer.Option(
        ...,
        "--trace",
        help="A trace or a log an importer reads; give several to fit them together.",
    ),
    out: Path = typer.Option(
        ..., "--out", help="YAML file to write (accepted by run/sweep --costs)."
    ),
    config: str | None = typer.Option(
        None, "--config", help="Scenario config or built-in name: model, links, base costs."
    ),
    lenient: bool = typer.Option(False, "--lenient", help="Skip bad trace rows and report them."),
    require_resize_fit: bool = typer.Option(
        False,
        "--require-resize-fit",
        help="Refuse (exit 2) unless the traces determine every resize-phase parameter.",
    ),
    train_gpus: int | None = flags.TRAIN_GPUS,
    rollout_gpus: int | None = flags.ROLLOUT_GPUS,
    model_params_b: float | None = flags.MODEL_PARAMS_B,
    gpu_memory_gb: float | None = flags.GPU_MEMORY_GB,
    link_gbps: float | None = flags.LINK_GBPS,
    strict: bool = flags.STRICT,
) -> None:
    from dynaresize.commands.cost_file import written_by_calibrate
    from dynaresize.commands.out_paths import check_output_file, input_paths
    from dynaresize.config import load_run_config
    from dynaresize.twin import context_from_config, open_trace, trace_notes
    from dynaresize.twin.calibration import calibrate as fit_traces
    from dynaresize.twin.calibration import calibrated_file
    from dynaresize.twin.run_facts import assumed_block, refuse_assumed

    with user_errors(about=[*trace, config]):
        check_output_file(
            out,
            inputs=input_paths(config=config, files=trace),
            ours=written_by_calibrate,
            owner="dynaresize calibrate",
        )
        facts = flags.run_facts(train_gpus, rollout_gpus, model_params_b, gpu_memory_gb, link_gbps)
        scenario = load_run_config(config) if config is not None else None
        split = scenario.cluster.initial_allocation if scenario is not None else None
        traces = [
            open_trace(path, lenient=lenient, facts=facts, config_split=split, config_name=config)
            for path in trace
        ]
        context = context_from_config(scenario, traces, facts=facts)
        if strict:
            refuse_assumed(context.assumed)
        # A FitError (traces that cannot determine a parameter) is a ConfigError: one line.
        fit, resize_fit = fit_traces(traces, context, require_resize_fit=require_resize_fit)
        header = [f"fitted by dynaresize calibrate from {', '.join(str(p) for p in trace)}"]
        header += assumed_block(context.assumed) + fit.warning_lines() + fit.report_lines()
        header += [f"note: {n}" for n in context.notes]
        if resize_fit is not None:
            header += resize_fit.report_lines()
        sources = [str(p) for p in trace]
        _write_yaml_atomically(out, calibrated_file(fit, traces, context, sources=sources), header)
    flags.print_assumed(context.assumed, context.warnings)
    for line in fit.warning_lines():
        print(line)
    for path, t in zip(trace, traces, strict=True):
        for note in trace_notes(t):
            print(f"{path}: {note}")
            if note.startswith("oversubscribed:"):
                print(
                    f"warning: {path} was recorded oversubscribed; its timings include contention"
                )
    for line in context.notes:
        print(f"note: {line}")
    for line in fit.report_lines():
        print(line)
    if resize_fit is not None:
        for line in resize_fit.report_lines():
            print(line)
    else:
        print("resize phases: no resize records in the traces; resize costs not calibrated")
    print(f"wrote {out}")


def _write_yaml_atomically(path: Path, data: dict, comments: list[str]) -> None:
    """Write to a temporary sibling and rename: a failure leaves no partial file behind. The
    data carries calibrate's stamp (`fitted_on`, twin/costs/provenance.py)."""
    from dynaresize.traces.staged_dir import write_file_atomically

    text = "".join(f"# {line}\n" for line in comments) + yaml.safe_dump(data, sort_keys=False)
    write_file_atomically(path, lambda f: f.write(text), label="--out")
