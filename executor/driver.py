"""`run_live`: the live run's front door: check and read every input before Ray starts
(`preflight.prepare_run`), start the cluster and the watchdog, build and run a `LiveSession`
(session.py: the workers set up, then the step loop and its resizes), and on every way out
record the fault (`faults.py`), release staging and stop what the run started.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from dynaresize.config_io import ConfigError
from dynaresize.twin.config import ScenarioConfig

from .cluster.engine_memory import resolve_release
from .cluster.placement import check_address
from .cluster.ray_cluster import start
from .cluster.runtime import Runtime
from .cluster.shutdown import (
    Guard,
    RendezvousFolder,
    bounded,
    sigint_ignored,
    sweep_left_staging,
)
from .config import DeviceKind, LiveConfig
from .faults import write_fault
from .job.live_job import resolve_job_paths
from .job.reward import RewardFunctionError
from .preflight import prepare_run
from .run_folder import checkpoint as ckpt
from .run_folder.resume_check import record_resume
from .run_folder.run_log import CONFIG_FILE, FAULT_FILE, SETUP_FILE, WORKERS_FILE
from .run_folder.unstarted import entries_before, kept_line, remove_added
from .session import LiveResult, LiveSession, close_rollout_engines
from .strategies.catalog import live_worker_class

__all__ = [
    "CONFIG_FILE",
    "FAULT_FILE",
    "SETUP_FILE",
    "WORKERS_FILE",
    "LiveResult",
    "LiveSession",
    "check_local_devices",
    "kept_line",
    "live_section",
    "run_live",
]


def live_section(config: Any) -> LiveConfig:
    """Accept a LiveConfig, or a run configuration that carries one under `live`."""
    if isinstance(config, LiveConfig):
        return config
    if isinstance(config, dict):
        return LiveConfig.model_validate(config.get("live", config))
    live = getattr(config, "live", None)
    if live is None:
        raise ValueError("live: the configuration has no `live` section for --mode live")
    return live if isinstance(live, LiveConfig) else LiveConfig.model_validate(live)


def run_live(
    config: Any,
    *,
    address: str | None = None,
    out_dir: str | Path,
    resume: bool = False,
    costs: str | Path | None = None,
    export_hf: str | Path | None = None,
) -> LiveResult:
    """Run the configured live job; everything is validated before Ray starts: the config, the
    checkpoint to resume, and the job's own inputs (model folder, prompt files, reward), which
    are read here once. Relative job paths are read from the current folder (the command line
    makes them absolute against the config file's folder first). `export_hf` (or
    `live.export_hf_dir`): write the trained policy there as a Hugging Face folder at the end."""
    live = resolve_job_paths(live_section(config), Path.cwd())
    if export_hf is not None:
        if live.model.path is None:
            raise ConfigError(
                "--export-hf writes a Hugging Face folder with the tokenizer of live.model.path; "
                "the config has no model.path"
            )
        live = live.model_copy(update={"export_hf_dir": str(Path(export_hf).absolute())})
    out = Path(out_dir)
    restored = ckpt.load(out) if resume else None
    prepared = prepare_run(live, out, restored, export_hf=export_hf, costs=costs)
    prompts, resume_note = prepared.prompts, prepared.resume_note
    if address is None:
        check_local_devices(live)
        note = sweep_left_staging()
        if note:
            print(f"note: {note}", file=sys.stderr)
    check_address(address)
    # `release: auto` becomes keep or destroy by the memory check before any worker starts;
    # config.json keeps what the user gave (a resume checks again), the notes say what was chosen
    run_config, engines = resolve_release(live, local=address is None)
    guard = Guard.start()  # kills what this run starts if the driver dies without cleaning up
    try:
        # cannot hold the run: nothing written
        cluster = start(run_config, address=address, actor_cls=live_worker_class())
    except BaseException:
        guard.done()
        raise
    before = entries_before(out)
    out.mkdir(parents=True, exist_ok=True)
    if resume_note is not None:
        record_resume(out, resume_note)
    (out / CONFIG_FILE).write_text(live.model_dump_json(indent=2))
    (out / FAULT_FILE).unlink(missing_ok=True)
    scenario = config if isinstance(config, ScenarioConfig) else None
    runtime = Runtime.for_cluster(
        cluster, run_config, allocation=restored.allocation if restored else None
    )
    rendezvous = RendezvousFolder.create() if address is None else None
    runtime.rendezvous_file = rendezvous.file if rendezvous else None
    session: LiveSession | None = None
    try:
        session = LiveSession(
            run_config,
            runtime,
            out,
            restored,
            Path(costs) if costs else None,
            scenario=scenario,
            prompts=prompts,
            notes=[
                *cluster.notes,
                engines.note,
                *filter(None, [live.rollout_engine.semantics_note(live.device.value)]),
            ],
        )
        result = session.run()
    except BaseException as err:
        with sigint_ignored():
            # a fresh run that took no step has nothing to resume: it leaves the folder as it
            # found it, so that a retry starts without --resume
            unstarted = restored is None and (session is None or not session.took_a_step)
            if not unstarted:
                write_fault(out / FAULT_FILE, err, runtime)
            # keep what was recorded, never hide the error that ended the run
            if session is not None:
                session.close(quiet=True)
            else:
                close_rollout_engines(runtime, quiet=True)
            if unstarted:
                remove_added(out, before)
        reward_error = _reward_error(err)
        if reward_error is not None:
            raise reward_error from None
        raise
    else:
        with sigint_ignored():  # the run is complete: a Ctrl-C now would only lose that
            session.close()
            bounded(session.release, what="releasing staging and process groups")
        return result
    finally:
        with sigint_ignored():
            if address is None:  # the workers are on this machine: wait for them to exit
                cluster.worker_pids = [int(i["pid"]) for i in runtime.worker_infos]
            cluster.shutdown()
            if rendezvous is not None:
                rendezvous.remove()
            guard.done()


def _reward_error(err: BaseException) -> RewardFunctionError | None:
    """A reward function's failure in a replica, without Ray's wrapping (one line for the
    user: the function, the sample, the exception)."""
    cause = getattr(err, "cause", err)
    for candidate in (cause, err):
        if isinstance(candidate, RewardFunctionError):
            return RewardFunctionError(
                function=candidate.function, sample=candidate.sample, problem=candidate.problem
            )
    return None


def check_local_devices(live: LiveConfig) -> None:
    """A local run on CUDA needs the GPUs it names; say so before Ray starts."""
    if live.device is not DeviceKind.CUDA:
        return
    import torch

    found = torch.cuda.device_count()
    if found < live.num_gpus:
        raise ConfigError(f"live.num_gpus: {live.num_gpus} CUDA devices asked, {found} found")
