"""`dynaresize run`: simulate policies (sim), replay a recorded trace, or run live on GPUs."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from dynaresize.commands import facts as flags
from dynaresize.commands.guard import user_errors


class Mode(str, Enum):
    SIM = "sim"
    REPLAY = "replay"
    LIVE = "live"


def register(app: typer.Typer) -> None:
    app.command(
        "run",
        help="Run policies in the twin (sim), against a recorded trace (replay) or on GPUs (live).",
    )(run)


def run(
    mode: Mode = typer.Option(Mode.SIM, "--mode", help="sim, replay or live."),
    config: str | None = typer.Option(
        None,
        "--config",
        help="Built-in config name (example, paper) or a YAML path; sim defaults to example.",
    ),
    policy: list[str] = typer.Option(
        [],
        "--policy",
        help="Policy KIND or KIND:key=value,...; repeat to compare several (default: the "
        "config's policies, else hysteresis).",
    ),
    costs: Path | None = typer.Option(
        None, "--costs", help="YAML file overriding any subset of the cost-model parameters."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Output folder (default: a new timestamped folder under runs/)."
    ),
    trace: Path | None = typer.Option(
        None, "--trace", help="replay: the trace to replay; sim: take the workload from it."
    ),
    steps: int | None = typer.Option(None, "--steps", min=1, help="Override the step count."),
    seed: int | None = typer.Option(None, "--seed", min=0, help="Override the workload seed."),
    address: str | None = typer.Option(
        None, "--address", help="live: Ray cluster to join (default: a local one on loopback)."
    ),
    resume: bool = typer.Option(
        False, "--resume", help="live: continue the run in --out from its last checkpoint."
    ),
    export_hf: Path | None = typer.Option(
        None,
        "--export-hf",
        help="live: write the trained policy to this new or empty folder as a Hugging Face "
        "model (needs live.model.path).",
    ),
    train_gpus: int | None = flags.TRAIN_GPUS,
    rollout_gpus: int | None = flags.ROLLOUT_GPUS,
    model_params_b: float | None = flags.MODEL_PARAMS_B,
    gpu_memory_gb: float | None = flags.GPU_MEMORY_GB,
    link_gbps: float | None = flags.LINK_GBPS,
    strict: bool = flags.STRICT,
    mechanisms: bool = typer.Option(
        False,
        "--mechanisms",
        help="sim and replay: also compare, on the same workload, the best static split, "
        "step-boundary resizes, lending within a step, both, and each one's offline optimum "
        "(mechanisms.csv, .json, .png).",
    ),
) -> None:
    fact_flags = (train_gpus, rollout_gpus, model_params_b, gpu_memory_gb, link_gbps)
    fact_options = (
        "--train-gpus",
        "--rollout-gpus",
        "--model-params-b",
        "--gpu-memory-gb",
        "--link-gbps",
    )
    given = {
        "--trace": trace is not None,
        "--steps": steps is not None,
        "--seed": seed is not None,
        "--address": address is not None,
        "--resume": resume,
        "--export-hf": export_hf is not None,
        **{o: v is not None for o, v in zip(fact_options, fact_flags, strict=True)},
        "--strict": strict,
        "--mechanisms": mechanisms,
    }
    with user_errors():
        refuse_unused_options(mode, given)
    if mode is Mode.SIM:
        _run_sim(config or "example", policy, costs, out, trace, steps, seed, mechanisms)
    elif mode is Mode.REPLAY:
        _run_replay(config, policy, costs, out, trace, fact_flags, strict, mechanisms)
    else:
        from dynaresize.commands.run_live import run_live_command

        run_live_command(
            config,
            policy,
            costs,
            out,
            steps,
            seed,
            address,
            resume,
            export_hf,
            overrides=_overrides(steps, seed),
        )


_FACT_OPTIONS = {
    "--train-gpus",
    "--rollout-gpus",
    "--model-params-b",
    "--gpu-memory-gb",
    "--link-gbps",
    "--strict",
}
"""Facts of a recorded run the log lacks: they describe the replayed run only."""

_OPTIONS_OF_MODE = {
    Mode.SIM: {"--trace", "--steps", "--seed", "--mechanisms"},
    Mode.REPLAY: {"--trace", "--mechanisms", *_FACT_OPTIONS},
    Mode.LIVE: {"--steps", "--seed", "--address", "--resume", "--export-hf"},
}
"""Mode-specific options each mode acts on; the others would be ignored, so they are refused."""


def refuse_unused_options(mode: Mode, given: dict[str, bool]) -> None:
    """An option the mode would ignore is a ConfigError naming it: silence would let a user
    believe, say, that `--seed` changed a replay."""
    from dynaresize.config_io import ConfigError

    for option, present in given.items():
        if present and option not in _OPTIONS_OF_MODE[mode]:
            users = [m.value for m, opts in _OPTIONS_OF_MODE.items() if option in opts]
            raise ConfigError(
                f"{option} does nothing with --mode {mode.value} (it applies to --mode "
                f"{' and '.join(users)}); leave it out"
            )


def _overrides(steps: int | None, seed: int | None) -> dict:
    simulation = {}
    if steps is not None:
        simulation["num_steps"] = steps
    if seed is not None:
        simulation["seed"] = seed
    return {"simulation": simulation} if simulation else {}


def _run_sim(config, policy, costs, out, trace, steps, seed, mechanisms) -> None:
    from dynaresize.commands.out_paths import check_output_folder, input_paths
    from dynaresize.commands.table import print_table
    from dynaresize.config import load_run_config
    from dynaresize.policies.registry import parse_policy_config, parse_policy_spec
    from dynaresize.twin import default_out_dir, load_costs, run_comparison, write_comparison
    from dynaresize.twin.shared_samples import SharedSamples

    with user_errors(config, about=[config, trace, costs]):
        if trace is not None and seed is not None:
            from dynaresize.config_io import ConfigError

            raise ConfigError(
                "--seed does nothing with --trace: the workload is the trace's, not drawn "
                "from a seed; leave --seed out"
            )
        _refuse_too_many_steps(steps)
        run_config = load_run_config(config, overrides=_overrides(steps, seed))
        destination = out or default_out_dir(run_config.output.runs_dir)
        inputs = input_paths(config=config, files=[costs, trace])
        check_output_folder(destination, inputs=inputs, replace=True)
        updates: dict = {}
        if costs is not None:
            updates["costs"] = load_costs(costs, base=run_config.costs)
        policies = [parse_policy_spec(spec) for spec in policy] or list(run_config.policies)
        if not policies:
            policies = [parse_policy_config({"kind": "hysteresis"})]
        updates["policies"] = policies
        workload = None
        if trace is not None:
            workload = _trace_workload(trace, steps)
            updates["simulation"] = run_config.simulation.model_copy(
                update={"num_steps": workload.num_steps}
            )
        run_config = run_config.model_copy(update=updates)
        # The samples table depends on the workload alone: written from the moment the
        # context exists, beside the simulation, then linked into the run folder.
        with SharedSamples(beside=destination) as samples:
            comparison = run_comparison(run_config, policies, workload=workload, samples=samples)
            side_by_side = None
            if mechanisms:
                from dynaresize.twin.mechanisms import compare_mechanisms

                side_by_side = compare_mechanisms(run_config, comparison.context)
            written = write_comparison(
                comparison,
                destination,
                resolved_config=run_config.model_dump(mode="json"),
                timeline_svg=run_config.output.timeline_svg,
                timeline_png=run_config.output.timeline_png,
                mechanisms=side_by_side,
                chrome_trace_max_steps=run_config.output.chrome_trace_max_steps,
                samples=samples,
            )
    title = (
        f"{run_config.name}: {run_config.simulation.num_steps} steps, "
        f"{run_config.pipeline.mode.value}, {run_config.pipeline.resize_strategy.value} resizes"
    )
    # regret_s stays in comparison.csv and summary.json; the terminal shows it as a share.
    print_table(comparison.table.drop(columns=["regret_s"]), title=title)
    if run_config.pipeline.lending:
        print(
            "note: the policies lend GPUs within steps, which the offline optimum of "
            "step-boundary schedules does not bound: no regret for them (--mechanisms gives "
            "lending's own bound)"
        )
    if side_by_side is not None:
        _print_mechanisms(side_by_side, title=f"{run_config.name}: mechanisms side by side")
    shown = run_config.output.chrome_trace_max_steps
    if shown is not None and run_config.simulation.num_steps > shown:
        print(
            f"note: trace.json shows the first {shown:,} of {run_config.simulation.num_steps:,} "
            "steps, so that trace viewers open it (output.chrome_trace_max_steps; null for "
            "every step); the tables hold every step"
        )
    print(f"wrote {written}")


def _print_mechanisms(side_by_side, *, title: str) -> None:
    """The mechanism table and the lines that say which wins."""
    from dynaresize.commands.table import print_table

    print_table(side_by_side.table, title=title)
    for line in side_by_side.summary:
        print(line)


def _refuse_too_many_steps(steps: int | None) -> None:
    """--steps past the twin's limit names the option (the config's check would name the
    config field the option overrides)."""
    from dynaresize.config_io import ConfigError
    from dynaresize.twin.config import MAX_SIMULATED_STEPS

    if steps is not None and steps > MAX_SIMULATED_STEPS:
        raise ConfigError(
            f"--steps {steps:,}: the twin simulates at most {MAX_SIMULATED_STEPS:,} steps in "
            "one run"
        )


def _trace_workload(trace: Path, steps: int | None):
    """The workload recorded in `trace`, its first `steps` steps if given (more is refused:
    the run would silently be shorter than asked)."""
    from dynaresize.config_io import ConfigError
    from dynaresize.twin import open_trace

    workload = open_trace(trace).to_workload()
    if steps is None:
        return workload
    if steps > workload.num_steps:
        raise ConfigError(
            f"--steps {steps}: the trace {trace} has {workload.num_steps} steps; "
            f"give at most {workload.num_steps} (or leave --steps out to take them all)"
        )
    return workload.slice_steps(0, steps)


def _run_replay(config, policy, costs, out, trace, fact_flags, strict, mechanisms) -> None:
    from dynaresize.commands.out_paths import check_output_folder, input_paths
    from dynaresize.commands.table import print_table
    from dynaresize.config import load_run_config
    from dynaresize.config_io import ConfigError
    from dynaresize.traces.staged_dir import staged_dir
    from dynaresize.twin.analysis import run_replay

    with user_errors(str(trace) if trace else None, about=[trace, config, costs]):
        if trace is None:
            raise ConfigError("--mode replay needs --trace FILE (a recorded trace or a log)")
        if out is not None:
            inputs = input_paths(config=config, files=[trace, costs])
            check_output_folder(out, inputs=inputs, replace=False)
        scenario = load_run_config(config) if config is not None else None
        replay = {
            "trace": trace,
            "config": scenario,
            "policies": policy or None,
            "costs": costs,
            "facts": flags.run_facts(*fact_flags),
            "strict": strict,
            "config_name": config,
            "mechanisms": mechanisms,
        }
        if out is None:
            result = run_replay(**replay)
        else:
            # The replay's files and its Chrome trace land together, or nothing does.
            with staged_dir(out, replace=False) as staging:
                result = run_replay(**replay, out_dir=staging)
                if result.policies:
                    _write_replay_trace(staging, trace, result.policies)
    flags.print_assumed(result.assumed, result.warnings)
    print_table(result.table, title=f"replay of {trace.name}")
    if result.mechanisms is not None:
        _print_mechanisms(result.mechanisms, title=f"replay of {trace.name}: mechanisms")
    for note in result.notes:
        print(f"note: {note}")
    if out is not None:
        print(f"wrote {out}")


def _write_replay_trace(out: Path, trace: Path, policies: dict) -> None:
    """trace.json (Chrome trace / Perfetto) of the first replayed policy, beside replay.csv (its
    first steps, for a long trace)."""
    from dynaresize.traces.chrome_trace import CHROME_TRACE_MAX_STEPS, write_chrome_trace

    name, first = next(iter(policies.items()))
    write_chrome_trace(
        out / "trace.json",
        first.steps,
        first.resizes,
        decisions=first.decisions,
        run_name=f"replay of {trace.name}: {name}",
        pipeline_mode=first.context.config.pipeline.mode,
        max_steps=CHROME_TRACE_MAX_STEPS,
    )
