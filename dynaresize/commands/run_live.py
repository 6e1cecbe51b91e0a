"""`dynaresize run --mode live`: a real Ray job from a config's `live:` section.

Apart from the twin's modes in `run` because it alone needs the `live` extra: nothing here is
imported unless the live mode runs, and every check that needs only the config runs before
the installed set is inspected or a cluster starts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from dynaresize.commands.guard import user_errors


def run_live_command(
    config, policy, costs, out, steps, seed, address, resume, export_hf, *, overrides: dict
) -> None:
    """Check the config and the installed set, then run the live job and print its outcome.

    `overrides` are the config overrides --steps and --seed make for every mode; the live
    section gets its own here."""
    from dynaresize.config import (
        load_run_config,
        refuse_twin_only_options,
        resolve_config_path,
    )
    from dynaresize.config_io import ConfigError
    from dynaresize.extras import check_live_install, require_live_extra
    from dynaresize.twin import default_out_dir

    with user_errors(config):
        if config is not None:  # before the live extra: the config alone settles it
            refuse_twin_only_options(load_run_config(config))
        require_live_extra("--mode live")
        if config is None:
            raise ConfigError("--mode live needs --config FILE with a `live:` section")
        if resume and out is None:
            raise ConfigError("--resume needs --out, the folder of the run to continue")
        if len(policy) > 1:
            raise ConfigError("--mode live runs one policy; give --policy once")
        live_overrides: dict = {}
        if steps is not None:
            live_overrides["num_steps"] = steps
        if seed is not None:
            live_overrides["seed"] = seed
        if policy:
            from dynaresize.policies.registry import parse_policy_spec

            live_overrides["policy"] = parse_policy_spec(policy[0]).model_dump(mode="json")
        overrides = dict(overrides)
        if live_overrides:
            overrides["live"] = live_overrides
        run_config = load_run_config(config, overrides=overrides)
        if run_config.live is None:
            raise ConfigError(f"{config}: --mode live needs a `live:` section in the config")
        from dynaresize.executor.job.live_job import resolve_job_paths

        # The job's files (model, prompts, reward) are named relative to the config's folder.
        config_dir = resolve_config_path(config).resolve().parent
        live = resolve_job_paths(run_config.live, config_dir)
        run_config = run_config.model_copy(update={"live": live})
        # Before anything imports transformers' models or starts Ray: a set of packages that
        # cannot run is one line naming the fix, not an import error in every worker.
        check_live_install("--mode live", uses_vllm=live.rollout_engine.kind.value == "vllm")
        from dynaresize.executor.driver import kept_line, run_live

        destination = out or default_out_dir(run_config.output.runs_dir)
        from dynaresize.executor.faults import WorkerLostError
        from dynaresize.executor.job.reward import RewardFunctionError

        try:
            result = run_live(
                run_config,
                address=address,
                out_dir=destination,
                resume=resume,
                costs=costs,
                export_hf=export_hf,
            )
        except (WorkerLostError, RewardFunctionError) as err:
            print(f"error: {err}", file=sys.stderr)
            print(kept_line(destination))
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            from dynaresize.executor.cluster.shutdown import (
                INTERRUPTED_EXIT_CODE,
                interrupted_message,
            )

            line = interrupted_message(
                destination,
                resume_command=_resume_command(
                    config, destination, address=address, steps=steps, seed=seed, policy=policy
                ),
            )
            print(line, file=sys.stderr)
            raise typer.Exit(INTERRUPTED_EXIT_CODE) from None
    print(
        f"live run: {result.steps_completed} steps, {result.num_resizes} resizes, "
        f"{result.total_s:.1f} s, final split {result.final_allocation}"
    )
    print(f"wrote {result.out_dir}")
    if result.exported_to is not None:
        print(f"wrote the trained policy to {result.exported_to}")


def _resume_command(
    config: str,
    out: Path,
    *,
    address: str | None,
    steps: int | None,
    seed: int | None,
    policy: list[str],
) -> str:
    """The command line that continues an interrupted live run (the same options)."""
    import shlex

    words = ["dynaresize", "run", "--mode", "live", "--config", config, "--out", str(out)]
    for option, value in (("--steps", steps), ("--seed", seed), ("--address", address)):
        if value is not None:
            words += [option, str(value)]
    for spec in policy:
        words += ["--policy", spec]
    return shlex.join([*words, "--resume"])
