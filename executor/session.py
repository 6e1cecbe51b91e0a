"""`LiveSession`: one live run on a started cluster: set up when built, then the step loop.

The session orchestrates; what the policy sees is its observer's (`observe/observer.py`), what
lands in the run folder its run log's (`run_folder/run_log.py`), a resize its strategy's
(`strategies/`). The loop, top down (one_step_off; sync generates batch k at the start of step
k instead):

    set_up_workers           world group, models, roles, weights, first weight sync
         |                   (cluster/worker_setup.py; in `LiveSession.__init__`)
    prelude                  replicas generate batch 0 with weights version 0
         |
    +--> step k ----------------------------------------------------------------------+
    |      strategy.before_train   finish whatever the update is about to read         |
    |      trainers: train on batch k  ||  replicas: generate batch k+1 (version k)     |
    |      weight sync             first trainer -> every replica (version k+1)         |
    |      records                 step, samples, lineage (step_records.py -> run log)  |
    |      strategy.after_step     background work of the last resize ends              |
    |      decide                  observer -> policy.decide -> resize at boundary      |
    |      checkpoint              every `checkpoint_every_steps`, batch k+1 included   |
    +----- k + 1 <------------------------------------------------------------------------+

A batch generated before a resize is trained on after it: it is data held by the driver, not
state of a worker, so a resize never loses, repeats or regenerates a sample, and the staleness
stays one version (the lineage records prove it). A worker that dies stops the run with its
records and last checkpoint intact; `resume=True` continues from that checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dynaresize.policies.registry import build_policy
from dynaresize.policies.types import Allocation
from dynaresize.twin.config import ScenarioConfig

from .batch import RolloutBatch, load_batch, save_batch, split_by_prompt, split_evenly
from .cluster.placement import node_notes
from .cluster.runtime import Calls, Runtime
from .cluster.worker_setup import set_up_workers
from .config import DeviceKind, LiveConfig, PipelineMode
from .job.live_job import export_policy, prepare_prompt_source
from .job.prompt_source import PromptItem, PromptSource
from .observe.cost_feedback import decision_cost_source
from .observe.observer import Observer
from .roles import RoleMap
from .run_folder import checkpoint as ckpt
from .run_folder.run_log import RunLog, run_meta, write_setup, write_workers
from .step_records import (
    ResizeLabel,
    StepClock,
    decision_record,
    phase_records,
    step_record,
    step_rows,
    transfer_records,
)
from .strategies.catalog import STRATEGIES, build_strategy
from .strategies.strategy import PhaseTiming, ResizeStrategy
from .worker.actor import LiveWorker
from .worker.collectives import collective_note
from .worker.engine import check_sync_digests
from .worker.rollout import RolloutReport, collect_batch
from .worker.shards import full_vectors
from .worker.sync_paths import count_paths, path_note
from .worker.trainer import TrainReport


@dataclass
class LiveResult:
    """Where a live run wrote its outputs, and a short summary of what happened."""

    out_dir: Path
    trace_dir: Path
    steps_completed: int
    num_resizes: int
    total_s: float
    final_allocation: Allocation
    exported_to: Path | None = None
    """The Hugging Face folder the trained policy was written to, if asked."""


class LiveSession:
    """One live run on a started cluster: set up when built, then the step loop and its records.

    `run_live` builds one per run; tests use it to drive the workers directly.
    """

    def __init__(
        self,
        live: LiveConfig,
        runtime: Runtime,
        out: Path,
        restored: ckpt.Checkpoint | None,
        costs_path: Path | None,
        *,
        scenario: ScenarioConfig | None = None,
        prompts: PromptSource | None = None,
        notes: Sequence[str] = (),
    ) -> None:
        """Set the workers of `runtime` up (every part timed in setup.json), then what the policy
        will see (`Observer`) and the run's records (`RunLog`): the session is ready to run.

        `restored`: the checkpoint a resumed run continues from; `costs_path`: calibrated cost
        models (`--costs`); `scenario`: the twin's description of the same cluster and model;
        `prompts`: the run's prompt source, read before Ray started (built from `live` when
        None); `notes`: what the trace's notes must say about the cluster and the engines. A
        failure here (a lost worker) has written nothing but workers.json and setup.json; the
        driver records it from `runtime`.
        """
        self.live, self.runtime, self.out, self.restored = live, runtime, out, restored
        self.prompts = prompts if prompts is not None else prepare_prompt_source(live)
        """Where every batch's prompts come from (the repeat task or the run's dataset); its
        position goes into each checkpoint."""
        self.one_step_off = live.pipeline is PipelineMode.ONE_STEP_OFF
        self.policy = build_policy(live.policy)
        self.strategy: ResizeStrategy = build_strategy(live.resize_strategy)
        self.num_resizes = restored.num_resizes if restored else 0
        self.resize_before_step: int | None = None
        """Id of the resize at the boundary before the next step, for its step record."""
        self.last_resize: ResizeLabel | None = None
        """The last resize, for its background phases, recorded once they have ended."""

        setup = set_up_workers(
            runtime, restored=restored, on_started=lambda infos: write_workers(out, infos)
        )
        write_setup(out, setup.timings_s)
        self.observer = Observer(
            live,
            num_params=setup.numel,
            setup_timings_s=setup.timings_s,
            setup_parts=STRATEGIES[self.strategy.name].setup_parts,
            costs_path=costs_path,
            scenario=scenario,
        )
        digest = self._first_trainer_digest()
        # the last call to the workers is behind: from here on nothing fails before `run`
        meta = run_meta(
            live,
            device_name=setup.device_name,
            num_params=setup.numel,
            allocation=runtime.roles.allocation,
            notes=[
                self.observer.prior_note,
                *node_notes(setup.worker_infos),
                collective_note(
                    device_type=live.device.value,
                    num_workers=live.num_workers,
                    num_gpus=live.num_gpus,
                ),
                *notes,
                *([path_note(setup.first_sync_paths)] if live.device is DeviceKind.CUDA else []),
                *(self.prompts.notes() if live.data is not None else []),
            ],
        )
        self.log = RunLog(out, meta=meta, restored=restored)
        self._record_published(digest, setup.first_sync_paths)

    # --- the run, top down ---------------------------------------------------------------

    def run(self) -> LiveResult:
        live, rt = self.live, self.runtime
        first = self.restored.next_step if self.restored else 0
        pending = self.restored.pending_batch if self.restored else None
        if self.one_step_off and pending is None and first < live.num_steps:
            rt.step = first
            pending = self._generate(first)
        for step in range(first, live.num_steps):
            rt.step, rt.phase = step, "step"
            batch, pending = self._step(step, pending)
            self.strategy.after_step(rt)
            self._record_background(self.strategy.pop_background_phases())
            if step + 1 < live.num_steps:  # no boundary after the last step to act on
                self._decide(step, batch)
            self.log.sync()
            self._checkpoint_if_due(step + 1, pending)
        exported = self._export() if live.export_hf_dir is not None else None
        return LiveResult(
            out_dir=self.out,
            trace_dir=self.out / "trace",
            steps_completed=max(first, live.num_steps),
            num_resizes=self.num_resizes,
            total_s=rt.clock(),
            final_allocation=rt.roles.allocation,
            exported_to=exported,
        )

    def _export(self) -> Path:
        """The trained policy (the first trainer's model) as a Hugging Face folder."""
        assert self.live.export_hf_dir is not None
        rt = self.runtime
        first = rt.roles.trainer_ids[0]
        flat = rt.call([first], LiveWorker.flat_weights).wait("exporting the policy")[first]
        return export_policy(self.live, flat, self.live.export_hf_dir)

    def _record_published(self, digest: str | None, paths: dict[str, int]) -> None:
        """weights.jsonl: the new version's digest (the sync's, else the first trainer's)."""
        rt = self.runtime
        digest = digest if digest is not None else self._first_trainer_digest()
        by = rt.roles.trainer_ids[0]
        self.log.published(rt.weights_version, digest, by_worker=by, replicas_by_path=paths)

    def _first_trainer_digest(self) -> str:
        rt = self.runtime
        first = rt.roles.trainer_ids[0]
        return rt.call([first], LiveWorker.weights_fingerprint).wait("digest")[first]

    @property
    def took_a_step(self) -> bool:
        """Whether a step has been recorded (by this run or, resumed, by the one before)."""
        return self.log.recorder.has_steps

    def close(self, *, quiet: bool = False) -> None:
        """End the rollout engines, convert the records to Parquet. `quiet` (a run that failed):
        a problem is not raised over the error that ended the run; the JSONL records stay."""
        close_rollout_engines(self.runtime, quiet=quiet)
        self.log.close(quiet=quiet)

    def release(self) -> None:
        """After a run that ended well: the strategy's staging pools and communicator caches,
        then every worker's process groups (a fault leaves this to killing the workers)."""
        rt = self.runtime
        self.strategy.release(rt)
        rt.call(rt.all_ids, LiveWorker.leave_world).wait("leaving the world group")

    # --- one step ------------------------------------------------------------------------

    def _step(
        self, step: int, pending: RolloutBatch | None
    ) -> tuple[RolloutBatch, RolloutBatch | None]:
        """Train on batch `step` (and, one_step_off, generate the next one meanwhile), sync the
        weights, record the step. Returns the batch trained on and the next one, if generated."""
        rt = self.runtime
        start_s = rt.clock()
        batch = pending if self.one_step_off else self._generate(step)
        assert batch is not None and batch.batch_id == step, "batch order broken"
        self.strategy.before_train(rt)
        training = self._launch_train(batch)
        generating = None
        if self.one_step_off and step + 1 < self.live.num_steps:
            generating = self._launch_rollout(step + 1)
        reports = training.wait(f"training on batch {step}")
        next_batch = None
        if generating is not None:
            next_batch = self._collect_rollout(step + 1, generating)
        sync_start = rt.clock()
        rt.weights_version += 1
        synced = rt.call(
            rt.roles.sync_ids, LiveWorker.sync_weights, weights_version=rt.weights_version
        ).wait("syncing weights")
        digest = check_sync_digests(synced, weights_version=rt.weights_version)
        self._record_published(digest, count_paths(synced))
        end_s = rt.clock()
        clock = StepClock(start_s=start_s, end_s=end_s, sync_s=end_s - sync_start)
        self._record_step(step, batch, reports, clock, concurrent=next_batch)
        return batch, next_batch

    def _launch_rollout(self, batch_id: int) -> Calls[RolloutReport]:
        """The replicas generate batch `batch_id`, its prompts split evenly among them."""
        rt = self.runtime
        items: list[PromptItem] = self.prompts.next_batch(batch_id)  # in order, even replaying
        if self.live.replay_batches_from is not None:
            return rt.call_each([])
        parts = split_evenly(items, len(rt.roles.rollout_ids))
        return rt.call_each(
            rt.call([w], LiveWorker.generate, batch_id=batch_id, items=part)
            for w, part in zip(rt.roles.rollout_ids, parts, strict=True)
            if part
        )

    def _collect_rollout(self, batch_id: int, calls: Calls[RolloutReport]) -> RolloutBatch:
        if self.live.replay_batches_from is not None:
            return load_batch(Path(self.live.replay_batches_from), batch_id)
        reports = calls.wait(f"generating batch {batch_id}")
        batch = collect_batch(batch_id, reports, objective=self.live.objective)
        if self.live.record_batches:
            save_batch(self.out, batch)
        return batch

    def _generate(self, batch_id: int) -> RolloutBatch:
        return self._collect_rollout(batch_id, self._launch_rollout(batch_id))

    def _launch_train(self, batch: RolloutBatch) -> Calls[TrainReport]:
        """The trainers train on the batch, split by whole prompt groups."""
        rt = self.runtime
        parts = split_by_prompt(batch.samples, rt.roles.num_trainers)
        num_tokens = int(batch.response_lengths().sum())
        return rt.call_each(
            rt.call([w], LiveWorker.train, part, num_batch_tokens=num_tokens)
            for w, part in zip(rt.roles.trainer_ids, parts, strict=True)
        )

    # --- at the boundary -----------------------------------------------------------------

    def _decide(self, step: int, last_batch: RolloutBatch) -> None:
        """Ask the policy what to do at this boundary, record its decision, resize if it says."""
        rt = self.runtime
        obs = self.observer.observation(
            step, clock=rt.clock, current=rt.roles.allocation, last_batch=last_batch
        )
        decision = self.policy.decide(obs)
        target = decision.target if decision.is_resize else None
        resize_id = self.num_resizes if target is not None else None
        record = decision_record(
            obs,
            decision,
            policy=getattr(self.live.policy, "kind", type(self.policy).__name__),
            cost_source=decision_cost_source(obs, decision).value,
            resize_id=resize_id,
            prior_over_measured=self.observer.take_prior_check(),
        )
        self.log.write([record])
        if target is not None:
            self._resize(step, target, predicted_s=record.predicted_resize_critical_s or 0.0)

    def _resize(self, step: int, target: Allocation, *, predicted_s: float) -> None:
        rt = self.runtime
        label = ResizeLabel(
            resize_id=self.num_resizes,
            step=step,
            strategy=self.strategy.name,
            from_allocation=rt.roles.allocation.label,
            to_allocation=target.label,
        )
        begin = rt.clock()
        rt.phase = "resize"
        phases = self.strategy.resize(rt, target=RoleMap.for_allocation(target))
        rt.phase = "step"
        critical_s = rt.clock() - begin
        self.last_resize = label
        self.log.write([*phase_records(label, phases), *transfer_records(label, phases)])
        self.observer.resized(critical_s, predicted_s=predicted_s, out=self.out)
        self.num_resizes += 1
        self.resize_before_step = label.resize_id

    def _checkpoint_if_due(self, next_step: int, pending: RolloutBatch | None) -> None:
        every = self.live.checkpoint_every_steps
        if every is None or (next_step % every != 0 and next_step != self.live.num_steps):
            return
        rt = self.runtime
        rt.phase = "checkpoint"
        shards = rt.call(rt.roles.trainer_ids, LiveWorker.export_shard).wait("writing a checkpoint")
        ckpt.save(
            self.out,
            ckpt.Checkpoint(
                next_step=next_step,
                weights_version=rt.weights_version,
                allocation=rt.roles.allocation,
                vectors=full_vectors(list(shards.values())),
                pending_batch=pending,
                num_resizes=self.num_resizes,
                prompt_source=self.prompts.state_dict(),
            ),
        )

    # --- records -------------------------------------------------------------------------

    def _record_step(
        self,
        step: int,
        batch: RolloutBatch,
        reports: dict[int, TrainReport],
        clock: StepClock,
        *,
        concurrent: RolloutBatch | None,
    ) -> None:
        roles = self.runtime.roles
        record = step_record(
            step=step,
            batch=batch,
            reports=reports,
            roles=roles,
            clock=clock,
            pipeline=self.live.pipeline,
            concurrent=concurrent,
            resize_id=self.resize_before_step,
        )
        self.resize_before_step = None
        self.observer.step_recorded(record, roles.allocation)
        self.log.step(record, *step_rows(step, batch, reports))

    def _record_background(self, phases: list[PhaseTiming]) -> None:
        """Phases a strategy overlapped with the step after its resize, once they have ended."""
        if phases and self.last_resize is not None:
            label = self.last_resize
            self.log.write([*phase_records(label, phases), *transfer_records(label, phases)])


def close_rollout_engines(runtime: Runtime, *, quiet: bool) -> None:
    """End every worker's rollout engine (an engine process and its model folder) before the
    actors go; after a failure (`quiet`), workers that cannot answer are skipped."""
    try:
        runtime.call(runtime.all_ids, LiveWorker.close_rollout_engine).wait(
            "closing rollout engines"
        )
    except Exception:
        if not quiet:
            raise
