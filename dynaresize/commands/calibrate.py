"""`dynaresize calibrate`: fit the twin's stage costs to measured traces and write costs.yaml."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import typer
import yaml

from dynaresize.commands.guard import user_errors


def register(app: typer.Typer) -> None:
    app.command(
        "calibrate",
        help="Fit rollout, training and weight-sync costs to traces; write a --costs YAML file.",
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
) -> None:
    from dynaresize.twin.analysis_context import context_from_config
    from dynaresize.twin.fit import fit_costs, fitted_overrides
    from dynaresize.twin.trace_source import open_trace, trace_notes

    with user_errors():
        traces = [open_trace(path, lenient=lenient) for path in trace]
        context = context_from_config(config, traces)
        fit = fit_costs(
            traces,
            base=context.costs,
            model=context.model,
            rollout_tp_size=context.rollout_tp_size,
            sync_bandwidth_gbps=context.sync_bandwidth_gbps,
        )
        header = [f"fitted by dynaresize calibrate from {', '.join(str(p) for p in trace)}"]
        header += fit.report_lines() + [f"assumed: {a}" for a in context.assumptions]
        _write_yaml_atomically(out, fitted_overrides(fit), header)
    for path, t in zip(trace, traces, strict=True):
        for note in trace_notes(t):
            print(f"{path}: {note}")
    for line in context.assumptions:
        print(f"assumed: {line}")
    for line in fit.report_lines():
        print(line)
    print(f"wrote {out}")


def _write_yaml_atomically(path: Path, data: dict, comments: list[str]) -> None:
    """Write to a temporary sibling and rename: a failure leaves no partial file behind."""
    text = "".join(f"# {line}\n" for line in comments) + yaml.safe_dump(data, sort_keys=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
