"""`dynaresize sweep`: many twin runs over a grid or random sample of settings, one table."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from dynaresize.commands.guard import user_errors
from dynaresize.config_io import ConfigError
from dynaresize.twin.sweeps.ray_probe import RAY_CONNECT_TIMEOUT_S

SUMMARY_ROWS = 15


def register(app: typer.Typer) -> None:
    app.command(
        "sweep",
        help="Sweep config fields by dotted path (grid or random) over workloads, traces and "
        "seeds; write results.parquet and a heatmap.",
    )(sweep)


def sweep(
    config: str = typer.Option(..., "--config", help="Scenario YAML file or built-in name."),
    param: list[str] = typer.Option(
        [],
        "--param",
        help="PATH=V1,V2,... (e.g. policy.cooldown_steps=5,10,20), or PATH=LOW..HIGH with "
        "--random. Repeat for more parameters.",
    ),
    random: int | None = typer.Option(
        None, "--random", help="Draw this many random points instead of the full grid."
    ),
    sample_seed: int | None = typer.Option(
        None, "--sample-seed", help="Seed of the random points (with --random; default 0)."
    ),
    seeds: int = typer.Option(1, "--seeds", help="Workload seeds per point: 0, 1, ... N-1."),
    workload: list[str] = typer.Option(
        [], "--workload", help="Workload preset to run on (repeat for several)."
    ),
    trace: list[Path] = typer.Option(
        [], "--trace", help="Trace whose recorded workload to run on (repeat for several)."
    ),
    costs: Path | None = typer.Option(
        None, "--costs", help="Calibrated cost parameters (YAML from `dynaresize calibrate`)."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Output folder (default: a new folder under runs/)."
    ),
    address: str | None = typer.Option(
        None,
        "--address",
        help="Ray cluster address ('local' starts one here); one that does not answer within "
        f"{RAY_CONNECT_TIMEOUT_S:g} s is an error.",
    ),
    jobs: int | None = typer.Option(
        None, "--jobs", help="Worker processes (default: every core, or the Ray cluster's CPUs)."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
) -> None:
    from dynaresize.commands.out_paths import check_output_folder, input_paths
    from dynaresize.config import load_run_config
    from dynaresize.twin.sweeps import run_sweep, sweep_summary

    target = out or Path("runs") / time.strftime("sweep-%Y%m%d-%H%M%S")
    figure_paths: list[Path] = []

    def draw_figure(table, folder: Path) -> None:
        figure_paths.append(
            _save_figure(table, folder, _title(config, table), sampled=random is not None)
        )

    with user_errors(config, about=[config, costs, *trace]):
        if sample_seed is not None and random is None:
            raise ConfigError(
                "--sample-seed does nothing without --random (a grid has no random points); "
                "leave it out or add --random N"
            )
        inputs = input_paths(config=config, files=[costs, *trace])
        check_output_folder(target, inputs=inputs, replace=False)
        if address is not None:
            from dynaresize.extras import missing_modules

            if missing_modules(("ray",)):
                raise ConfigError(
                    "sweep --address needs Ray, in the `live` extra: pip install 'dynaresize[live]'"
                )
        table = run_sweep(
            load_run_config(config),
            params=param,
            random=random,
            sample_seed=sample_seed or 0,
            seeds=seeds,
            workloads=workload or None,
            traces=trace or None,
            costs=costs,
            out=target,
            jobs=jobs,
            ray_address=address,
            progress=progress,
            extra_outputs=draw_figure,
        )
    for note in table.attrs.get("notes", ()):
        print(f"note: {note}")
    summary = sweep_summary(table)
    print(summary.head(SUMMARY_ROWS).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if len(summary) > SUMMARY_ROWS:
        print(f"... {len(summary) - SUMMARY_ROWS} more settings in {target / 'results.parquet'}")
    figure = target / figure_paths[0].name
    print(f"{len(table)} runs; wrote {target / 'results.parquet'} and {figure}")


def _title(config: str, table) -> str:
    workloads = ", ".join(sorted(map(str, table["workload"].unique())))
    policies = ", ".join(sorted(map(str, table["policy"].unique())))
    return (
        f"{Path(config).stem}: {policies} on {workloads}, "
        f"{table['seed'].nunique()} seed(s), {len(table)} runs"
    )


def _save_figure(table, target: Path, title: str, *, sampled: bool) -> Path:
    """The cooldown-by-threshold style heatmap when two parameters vary (a scatter of the
    points for random samples), else bars per policy or per value of the one parameter."""
    from dynaresize.twin import plots

    varied = [c for c in table.columns if "." in c and table[c].nunique() > 1]
    if len(varied) >= 2 and sampled:
        fig = plots.plot_sweep_scatter(table, x=varied[0], y=varied[1], title=title)
        path = target / "scatter.png"
    elif len(varied) >= 2:
        fig = plots.plot_sweep_heatmap(table, x=varied[0], y=varied[1], title=title)
        path = target / "heatmap.png"
    else:
        by = varied[0] if varied else "policy"
        fig = plots.plot_policy_comparison(
            table,
            by=by,
            metric="speedup",
            metric_label="speedup against the best static split (×)",
            title=title,
        )
        path = target / "comparison.png"
    fig.savefig(path, dpi=110)
    return path
