"""`dynaresize breakeven`: after how many steps a resize pays for itself, and what to set."""

from __future__ import annotations

from pathlib import Path

import typer

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
) -> None:
    from dynaresize.config import load_run_config
    from dynaresize.twin import context_from_config, open_trace
    from dynaresize.twin.analysis import breakeven_for_trace, report_lines

    with user_errors():
        loaded = open_trace(trace, lenient=lenient)
        scenario = load_run_config(config) if config is not None else None
        context = context_from_config(scenario, [loaded], costs_path=costs)
        report, fit = breakeven_for_trace(
            loaded,
            context,
            job_steps=job_steps,
            fit_to_trace=costs is None,
            imbalance_threshold=threshold,
            confidence=confidence,
            seed=seed,
        )
    if loaded.skipped:
        print(f"{trace}: {loaded.skipped_summary()}")
    if fit is not None:
        print("fit of the stage costs to the trace:")
        for line in fit.quality_lines():
            print(f"  {line}")
    for line in report_lines(report):
        print(line)
