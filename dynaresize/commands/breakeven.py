"""`dynaresize breakeven`: after how many steps a resize pays for itself, and what to set."""

from __future__ import annotations

from pathlib import Path

import typer

from dynaresize.commands import facts as flags
from dynaresize.commands.guard import user_errors


def register(app: typer.Typer) -> None:
    app.command(
        "breakeven",
        help="Break-even of each resize on a trace, how long imbalances last, and advice.",
    )(breakeven)


def breakeven(
    trace: Path = typer.Option(..., "--trace", help="A trace or a log an importer reads."),
    config: str | None = typer.Option(
        None, "--config", help="Scenario config or built-in name: candidates, model, links."
    ),
    job_steps: int = typer.Option(
        1000, "--job-steps", min=1, help="Length of the job to project savings for (steps)."
    ),
    costs: Path | None = typer.Option(
        None, "--costs", help="Use these cost parameters instead of fitting them to the trace."
    ),
    threshold: float = typer.Option(
        0.1, "--imbalance-threshold", min=0.0, max=1.0, help="|imbalance| counted as imbalanced."
    ),
    confidence: float = typer.Option(
        0.9, "--confidence", min=0.5, max=0.999, help="Coverage of the bootstrap interval."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap."),
    lenient: bool = typer.Option(False, "--lenient", help="Skip bad trace rows and report them."),
    out: Path | None = typer.Option(
        None, "--out", help="Write the report as JSON here (assumed facts included)."
    ),
    train_gpus: int | None = flags.TRAIN_GPUS,
    rollout_gpus: int | None = flags.ROLLOUT_GPUS,
    model_params_b: float | None = flags.MODEL_PARAMS_B,
    gpu_memory_gb: float | None = flags.GPU_MEMORY_GB,
    link_gbps: float | None = flags.LINK_GBPS,
    strict: bool = flags.STRICT,
) -> None:
    from dynaresize.config import load_run_config
    from dynaresize.twin import context_from_config, open_trace
    from dynaresize.twin.analysis import breakeven_for_trace, report_lines
    from dynaresize.twin.analysis.trace_breakeven import write_report_json
    from dynaresize.twin.run_facts import refuse_assumed

    with user_errors(about=[trace, config, costs]):
        facts = flags.run_facts(train_gpus, rollout_gpus, model_params_b, gpu_memory_gb, link_gbps)
        scenario = load_run_config(config) if config is not None else None
        split = scenario.cluster.initial_allocation if scenario is not None else None
        loaded = open_trace(
            trace, lenient=lenient, facts=facts, config_split=split, config_name=config
        )
        context = context_from_config(scenario, [loaded], costs_path=costs, facts=facts)
        if strict:
            refuse_assumed(context.assumed)
        report, fit = breakeven_for_trace(
            loaded,
            context,
            job_steps=job_steps,
            fit_to_trace=costs is None,
            imbalance_threshold=threshold,
            confidence=confidence,
            seed=seed,
        )
        if out is not None:
            write_report_json(report, out)
    flags.print_assumed(report.assumed, report.warnings)
    if loaded.skipped:
        print(f"{trace}: {loaded.skipped_summary()}")
    if fit is not None:
        print("fit of the stage costs to the trace:")
        for line in fit.quality_lines():
            print(f"  {line}")
    for line in report_lines(report):
        print(line)
    if out is not None:
        print(f"wrote {out}")
