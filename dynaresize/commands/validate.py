"""`dynaresize validate`: replay a live run in the calibrated twin and report the twin's error."""

from __future__ import annotations

from pathlib import Path

import typer

from dynaresize.commands import facts as flags
from dynaresize.commands.guard import user_errors


def register(app: typer.Typer) -> None:
    app.command(
        "validate",
        help="Replay a recorded run in the twin from its workload and decisions with fitted "
        "costs; report per-step, total and resize critical-path errors.",
    )(validate)


def validate(
    trace: Path = typer.Option(..., "--trace", help="The recorded run (a live run's trace)."),
    costs: Path = typer.Option(
        ..., "--costs", help="Fitted cost parameters (written by dynaresize calibrate)."
    ),
    config: str | None = typer.Option(
        None, "--config", help="Scenario config or built-in name: candidates, model, links."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Folder for validation.json, per_step.csv, resizes.csv, the plot."
    ),
    lenient: bool = typer.Option(False, "--lenient", help="Skip bad trace rows and report them."),
    train_gpus: int | None = flags.TRAIN_GPUS,
    rollout_gpus: int | None = flags.ROLLOUT_GPUS,
    model_params_b: float | None = flags.MODEL_PARAMS_B,
    gpu_memory_gb: float | None = flags.GPU_MEMORY_GB,
    link_gbps: float | None = flags.LINK_GBPS,
    strict: bool = flags.STRICT,
    force: bool = typer.Option(
        False,
        "--force",
        help="Validate although --config differs from the run's own scenario or the cost file "
        "was not written by calibrate (noted in the report).",
    ),
) -> None:
    from dynaresize.commands.out_paths import check_output_folder, input_paths
    from dynaresize.config import load_run_config
    from dynaresize.twin.calibration import run_validation

    with user_errors(about=[trace, costs, config]):
        if out is not None:
            inputs = input_paths(config=config, files=[trace, costs])
            check_output_folder(out, inputs=inputs, replace=False)
        if not costs.is_file():
            raise FileNotFoundError(2, "no such cost file", str(costs))
        facts = flags.run_facts(train_gpus, rollout_gpus, model_params_b, gpu_memory_gb, link_gbps)
        scenario = load_run_config(config) if config is not None else None
        report = run_validation(
            trace=trace,
            costs=costs,
            config=scenario,
            out_dir=out,
            lenient=lenient,
            facts=facts,
            strict=strict,
            force=force,
        )
    flags.print_assumed(report.assumed, report.warnings)
    for line in report.summary_lines():
        print(line)
    for note in report.notes:
        print(f"note: {note}")
    if out is not None:
        print(f"wrote {out}")
