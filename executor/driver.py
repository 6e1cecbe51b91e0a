"""`run_live`: real GRPO on Ray workers whose roles the policy moves at step boundaries.

The loop, top down (one_step_off; sync generates batch k at the start of step k instead):

    setup        workers join the world group, build the model, take their roles
    prelude      rollout of batch 0 with weights version 0
    step k       train on batch k  ||  rollout of batch k+1 (weights version k)
                 weight sync (version k+1) to the rollout replicas
                 records; observation -> policy.decide -> resize at the boundary; checkpoint

A batch generated before a resize is trained on after it: it is data held by the driver, not
state of a worker, so a resize never loses, repeats or regenerates a sample, and the staleness
stays one version (the lineage records prove it). A worker that dies stops the run with its
records and last checkpoint intact; `resume=True` continues from that checkpoint.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dynaresize.config_io import ConfigError
from dynaresize.policies.registry import build_policy
from dynaresize.policies.types import Allocation, Decision, StageTimes, StepObservation
from dynaresize.traces.schema import (
    DecisionRecord,
    ResizePhaseRecord,
    RunMeta,
    SampleRecord,
    StepRecord,
)
from dynaresize.twin.config import ScenarioConfig

from . import checkpoint as ckpt
from .batch import RolloutBatch, load_batch, save_batch, split_by_prompt, split_evenly
from .cluster import Cluster, start
from .config import DeviceKind, LiveConfig, PipelineMode
from .cost_feedback import ResizeCostFeedback, decision_cost_source
from .estimates import CandidateEstimator
from .records import LineageRecord, RunRecorder
from .resize import ResizeStrategy
from .roles import RoleMap
from .rollout import RolloutReport, collect_batch
from .runtime import Calls, Runtime, WorkerLostError
from .shards import ShardLayout, full_vectors, shards_from_full
from .strategies.catalog import build_strategy
from .trainer import TrainReport
from .worker import LiveWorker

FAULT_FILE = "fault.json"
WORKERS_FILE = "workers.json"
SETUP_FILE = "setup.json"
CONFIG_FILE = "config.json"


@dataclass
class LiveResult:
    """Where a live run wrote its outputs, and a short summary of what happened."""

    out_dir: Path
    trace_dir: Path
    steps_completed: int
    num_resizes: int
    total_s: float
    final_allocation: Allocation


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
) -> LiveResult:
    """Run the configured live job; everything is validated before Ray starts."""
    live = live_section(config)
    out = Path(out_dir)
    restored = ckpt.load(out) if resume else None
    if costs is not None and not Path(costs).is_file():
        raise FileNotFoundError(costs)
    if live.replay_batches_from is not None and not Path(live.replay_batches_from).is_dir():
        raise FileNotFoundError(live.replay_batches_from)
    if address is None:
        check_local_devices(live)
    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG_FILE).write_text(live.model_dump_json(indent=2))
    (out / FAULT_FILE).unlink(missing_ok=True)
    cluster = start(live, address=address)
    scenario = config if isinstance(config, ScenarioConfig) else None
    driver = LiveSession(
        live, cluster, out, restored, Path(costs) if costs else None, scenario=scenario
    )
    try:
        result = driver.run()
    except BaseException as err:
        if isinstance(err, WorkerLostError):
            (out / FAULT_FILE).write_text(json.dumps(err.as_dict() | {"message": str(err)}))
        driver.close(quiet=True)  # keep what was recorded, never hide the error that ended it
        raise
    else:
        driver.close()
        return result
    finally:
        cluster.shutdown()


def check_local_devices(live: LiveConfig) -> None:
    """A local run on CUDA needs the GPUs it names; say so before Ray starts."""
    if live.device is not DeviceKind.CUDA:
        return
    import torch

    found = torch.cuda.device_count()
    if found < live.num_gpus:
        raise ConfigError(f"live.num_gpus: {live.num_gpus} CUDA devices asked, {found} found")


class LiveSession:
    """One live run on a started cluster: setup, the step loop, and its records.

    `run_live` builds one per run; tests use it to drive the workers directly.
    """

    def __init__(
        self,
        live: LiveConfig,
        cluster: Cluster,
        out: Path,
        restored: ckpt.Checkpoint | None,
        costs_path: Path | None,
        *,
        scenario: ScenarioConfig | None = None,
    ) -> None:
        self.live = live
        self.scenario = scenario
        """The twin's description of the same cluster and model (a run config), if given."""
        self.out = out
        self.restored = restored
        self.costs_path = costs_path
        allocation = restored.allocation if restored else live.initial_allocation
        self.runtime = Runtime(
            config=live,
            workers=cluster.workers,
            roles=RoleMap.for_allocation(allocation),
            start_wall=time.perf_counter(),
        )
        self.policy = build_policy(live.policy)
        self.strategy: ResizeStrategy = build_strategy(live.resize_strategy)
        self.recent: deque[StageTimes] = deque(maxlen=live.recent_window_steps)
        self.measured_resize_s: list[float] = []
        self.num_resizes = restored.num_resizes if restored else 0
        self.steps_since_resize: int | None = None
        self.recorder: RunRecorder | None = None
        self.estimator: CandidateEstimator | None = None
        self.cost_feedback: ResizeCostFeedback | None = None

    def _meta(self, device_name: str) -> RunMeta:
        return RunMeta(
            source="executor",
            cluster=f"{self.live.num_workers} workers on {device_name}",
            gpu_type=device_name,
            num_gpus=self.live.num_workers,
            model_name=json.dumps(
                self.live.model.model_dump(mode="json", exclude_unset=True), sort_keys=True
            ),
            model_params_b=self.numel / 1e9,
            pipeline_mode=self.live.pipeline,
            start_train_gpus=self.runtime.roles.allocation.train_gpus,
            start_rollout_gpus=self.runtime.roles.allocation.rollout_gpus,
            notes=[
                f"device={self.live.device.value}",
                f"strategy={self.live.resize_strategy.value}",
                f"rollout_engines={self.live.rollout_engines.value}",
            ],
        )

    # --- setup ---------------------------------------------------------------------------

    def setup(self) -> None:
        """Start every worker's process group, model and role; time each part (setup.json)."""
        timings: dict[str, float] = {}
        last = self.runtime.clock()

        def lap(name: str) -> None:
            nonlocal last
            now = self.runtime.clock()
            timings[name] = now - last
            last = now

        self._lap = lap
        device_name = self._setup_body()
        lap("first_weight_sync")
        (self.out / SETUP_FILE).write_text(json.dumps(timings, indent=2))
        self.recorder = RunRecorder(
            self.out,
            meta=self._meta(device_name),
            resume_from_step=self.restored.next_step if self.restored else None,
        )

    def _setup_body(self) -> str:
        rt, lap = self.runtime, self._lap
        infos = rt.call(rt.all_ids, LiveWorker.info).wait("starting")
        lap("actors_started")
        (self.out / WORKERS_FILE).write_text(json.dumps([infos[w] for w in rt.all_ids]))
        rt.form_world(master_addr=infos[0]["node_ip"])
        lap("world_group")
        numels = rt.call(rt.all_ids, LiveWorker.build_model).wait("building the model")
        self.numel = numels[0]
        lap("models_built")
        roles = rt.roles
        version = self.restored.weights_version if self.restored else 0
        rt.weights_version = version
        rt.take_roles(weights_version=version, lap=lap)
        if self.restored is None:
            rt.call(roles.trainer_ids, LiveWorker.initial_shard).wait("loading initial weights")
        else:
            layout = ShardLayout(numel=self.numel, num_ranks=roles.num_trainers)
            shards = shards_from_full(
                self.restored.vectors, layout, optimizer_step=self.restored.weights_version
            )
            rt.call_each(
                rt.call([w], LiveWorker.load_shard, shards[roles.trainer_rank(w)])
                for w in roles.trainer_ids
            ).wait("loading the checkpoint")
            rt.call(roles.trainer_ids, LiveWorker.refresh_model_from_master).wait(
                "gathering weights"
            )
        rt.call(roles.sync_ids, LiveWorker.sync_weights, weights_version=version).wait(
            "first weight sync"
        )
        self.estimator = CandidateEstimator.for_run(
            self.live,
            num_params=self.numel,
            strategy=self.strategy.name,
            costs_path=self.costs_path,
            scenario=self.scenario,
        )
        # Resize costs the policy sees: the twin's until this run has measured its own.
        self.cost_feedback = ResizeCostFeedback(
            fallback_critical_s=self.estimator.model_critical_s,
            fallback_background_s=self.estimator.model_background_s,
            fallback_source=self.estimator.model_source,
        )
        return str(infos[0]["device_name"])

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> LiveResult:
        self.setup()
        live, rt = self.live, self.runtime
        first = self.restored.next_step if self.restored else 0
        pending = self.restored.pending_batch if self.restored else None
        one_step_off = live.pipeline is PipelineMode.ONE_STEP_OFF
        if one_step_off and pending is None and first < live.num_steps:
            rt.step = first
            pending = self._rollout_wait(first)
        completed = first
        for step in range(first, live.num_steps):
            rt.step = step
            start_s = rt.clock()
            if not one_step_off:
                pending = self._rollout_wait(step)
            batch = pending
            assert batch is not None and batch.batch_id == step, "batch order broken"
            self.strategy.before_train(rt)
            train_calls = self._launch_train(batch)
            launched = None
            if one_step_off and step + 1 < live.num_steps:
                launched = self._launch_rollout(step + 1)
            reports = train_calls.wait(f"training on batch {step}")
            pending = self._collect_rollout(step + 1, launched) if launched is not None else None
            sync_start = rt.clock()
            rt.weights_version += 1
            rt.call(
                rt.roles.sync_ids, LiveWorker.sync_weights, weights_version=rt.weights_version
            ).wait("syncing weights")
            end_s = rt.clock()
            self._record_step(
                step, batch, reports, start_s, end_s, sync_s=end_s - sync_start, concurrent=pending
            )
            self.strategy.after_step(rt)
            self._record_background(self.strategy.pop_background_phases())
            if step + 1 < live.num_steps:  # no boundary after the last step to act on
                self._decide(step, batch)
            self._recorder().sync()
            completed = step + 1
            every = live.checkpoint_every_steps
            if every is not None and (completed % every == 0 or completed == live.num_steps):
                self._checkpoint(completed, pending)
        total_s = rt.clock()
        return LiveResult(
            out_dir=self.out,
            trace_dir=self.out / "trace",
            steps_completed=completed,
            num_resizes=self.num_resizes,
            total_s=total_s,
            final_allocation=rt.roles.allocation,
        )

    def close(self, *, quiet: bool = False) -> None:
        """Convert the records to Parquet. `quiet` (a run that failed): a conversion problem is
        not raised over the error that ended the run; the JSONL records stay either way."""
        if self.recorder is None:
            return
        try:
            self.recorder.finish()
        except Exception:
            self.recorder.close()
            if not quiet:
                raise

    def _recorder(self) -> RunRecorder:
        assert self.recorder is not None, "records start after setup"
        return self.recorder

    # --- rollout -------------------------------------------------------------------------

    def _launch_rollout(self, batch_id: int) -> Calls[RolloutReport]:
        rt = self.runtime
        if self.live.replay_batches_from is not None:
            return rt.call_each([])
        prompt_ids = [
            batch_id * self.live.prompts_per_step + i for i in range(self.live.prompts_per_step)
        ]
        parts = split_evenly(prompt_ids, len(rt.roles.rollout_ids))
        return rt.call_each(
            rt.call([w], LiveWorker.generate, batch_id=batch_id, prompt_ids=part)
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

    def _rollout_wait(self, batch_id: int) -> RolloutBatch:
        return self._collect_rollout(batch_id, self._launch_rollout(batch_id))

    # --- training ------------------------------------------------------------------------

    def _launch_train(self, batch: RolloutBatch) -> Calls[TrainReport]:
        rt = self.runtime
        parts = split_by_prompt(batch.samples, rt.roles.num_trainers)
        num_tokens = int(batch.response_lengths().sum())
        return rt.call_each(
            rt.call([w], LiveWorker.train, part, num_batch_tokens=num_tokens)
            for w, part in zip(rt.roles.trainer_ids, parts, strict=True)
        )

    # --- records -------------------------------------------------------------------------

    def _record_step(
        self,
        step: int,
        batch: RolloutBatch,
        reports: dict[int, TrainReport],
        start_s: float,
        end_s: float,
        *,
        sync_s: float,
        concurrent: RolloutBatch | None,
    ) -> StageTimes:
        roles = self.runtime.roles
        alloc = roles.allocation
        train_s = max(r.train_s for r in reports.values())
        step_s = end_s - start_s
        busy_rollout = concurrent.rollout_s if concurrent else 0.0
        if self.live.pipeline is PipelineMode.SYNC:
            busy_rollout = batch.rollout_s
        lengths = batch.response_lengths()
        record = StepRecord(
            step=step,
            start_s=start_s,
            end_s=end_s,
            rollout_s=batch.rollout_s,
            train_s=train_s,
            sync_s=sync_s,
            step_s=step_s,
            idle_train_gpu_s=max(0.0, step_s - train_s - sync_s) * alloc.train_gpus,
            idle_rollout_gpu_s=max(0.0, step_s - busy_rollout - sync_s) * alloc.rollout_gpus,
            train_gpus=alloc.train_gpus,
            rollout_gpus=alloc.rollout_gpus,
            device_roles=roles.device_roles(),
            resize_id=self._resize_before_step,
            rollout_batch_id=batch.batch_id,
            rollout_weights_version=batch.weights_version,
            num_samples=len(batch.samples),
            tokens=batch.num_tokens(),
            response_len_mean=float(lengths.mean()),
            response_len_p50=float(np.percentile(lengths, 50)),
            response_len_p99=float(np.percentile(lengths, 99)),
            response_len_max=float(lengths.max()),
        )
        self._resize_before_step = None
        assert self.cost_feedback is not None
        self.cost_feedback.observe_step_record(record)
        samples = [
            SampleRecord(
                step=step,
                sample_index=i,
                prompt_tokens=len(s.prompt_token_ids),
                response_tokens=len(s.response_token_ids),
                device=s.generated_by_device,
                finish_s=None,
            )
            for i, s in enumerate(batch.samples)
        ]
        self._recorder().write([record, *samples])
        by_key = {s.key: s for s in batch.samples}
        self._recorder().write_lineage(
            LineageRecord(
                step=step,
                rollout_batch_id=batch.batch_id,
                prompt_id=key[0],
                sample_index=key[1],
                generated_weights_version=by_key[key].weights_version,
                generated_by_device=by_key[key].generated_by_device,
                consumed_by_device=report.worker_id,
                trainer_weights_version=report.weights_version,
                response_tokens=len(by_key[key].response_token_ids),
            )
            for report in reports.values()
            for key in report.consumed
        )
        times = StageTimes(
            step=step,
            allocation=alloc,
            rollout_s=batch.rollout_s,
            train_s=train_s,
            sync_s=sync_s,
            step_s=step_s,
        )
        self.recent.append(times)
        return times

    _resize_before_step: int | None = None

    # --- decisions and resizes -----------------------------------------------------------

    def _decide(self, step: int, last_batch: RolloutBatch) -> None:
        rt = self.runtime
        current = rt.roles.allocation
        if self.steps_since_resize is not None:
            self.steps_since_resize += 1
        assert self.estimator is not None
        candidates = self.estimator.predict(
            current=current,
            recent=tuple(self.recent),
            measured_resize_s=tuple(self.measured_resize_s),
            last_batch=last_batch,
        )
        assert self.cost_feedback is not None
        candidates = self.cost_feedback.with_costs(candidates, current=current)
        obs = StepObservation(
            step=step,
            now_s=rt.clock(),
            allocation=current,
            recent=tuple(self.recent),
            candidates=candidates,
            steps_since_resize=self.steps_since_resize,
            remaining_steps=self.live.num_steps - step - 1,
            measured_resize_costs_s=tuple(self.measured_resize_s),
        )
        decision: Decision = self.policy.decide(obs)
        resize_id = self.num_resizes if decision.is_resize else None
        chosen = obs.candidate(decision.target) if decision.is_resize else None
        self._recorder().write(
            [
                DecisionRecord(
                    step=step,
                    time_s=obs.now_s,
                    policy=getattr(self.live.policy, "kind", type(self.policy).__name__),
                    decision=decision.kind.value,
                    from_allocation=current.label,
                    to_allocation=decision.target.label if decision.target else None,
                    reason=decision.reason,
                    cost_source=decision_cost_source(obs, decision).value,
                    predicted_resize_critical_s=chosen.predicted_resize_critical_s
                    if chosen
                    else None,
                    resize_id=resize_id,
                )
            ]
        )
        if decision.is_resize:
            self._resize(step, decision.target, resize_id)

    def _resize(self, step: int, target: Allocation, resize_id: int) -> None:
        rt = self.runtime
        old = rt.roles
        begin = rt.clock()
        phases = self.strategy.resize(rt, target=RoleMap.for_allocation(target))
        critical_s = rt.clock() - begin
        self._last_resize = (resize_id, step, old.allocation.label, target.label)
        self._write_phases(phases)
        self.measured_resize_s.append(critical_s)
        self.num_resizes += 1
        self.steps_since_resize = 0
        self._resize_before_step = resize_id

    _last_resize: tuple[int, int, str, str] | None = None

    def _record_background(self, phases: list) -> None:
        """Phases a strategy overlapped with the step after its resize, once they have ended."""
        if phases and self._last_resize is not None:
            self._write_phases(phases)

    def _write_phases(self, phases: list) -> None:
        """Resize phase records of the last resize."""
        assert self._last_resize is not None
        resize_id, step, before, after = self._last_resize
        self._recorder().write(
            ResizePhaseRecord(
                resize_id=resize_id,
                step=step,
                phase=p.phase,
                strategy=self.strategy.name,
                from_allocation=before,
                to_allocation=after,
                start_s=p.start_s,
                end_s=p.end_s,
                critical=p.critical,
                bytes_moved=p.bytes_moved,
            )
            for p in phases
        )

    # --- checkpoints ---------------------------------------------------------------------

    def _checkpoint(self, next_step: int, pending: RolloutBatch | None) -> None:
        rt = self.runtime
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
            ),
        )
