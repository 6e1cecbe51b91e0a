"""The Rollout role: a rollout engine on one worker, fed weights by the trainers every step.

The engine is the run's `rollout_engine` (the project's sampler, HF `generate` or vLLM), which the
worker keeps across role changes (`engine.WorkerEngine`); without one given the role builds
the project's sampler over the worker's model, as a standalone replica does.

A replica generates every sample of the prompts the driver sends it (`PromptItem`s drawn by the
driver's prompt source: the repeat task, or a dataset) and scores each with the job's scorer.
Each sample is seeded by (step, prompt id, sample index), so which replica generates a sample
does not change its tokens (up to the numerics the sampler documents), and a resize that changes
the number of replicas does not change the data.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from dynaresize.traces.worker_steps import RolloutReplicaStep

from ..batch import RolloutBatch, RolloutSample
from ..config import LiveConfig
from ..engines.interface import FinishReason, GenerationRequest, RolloutEngine, SamplingParams
from ..engines.sampler import KVCacheSampler, SamplerConfig
from ..job.live_job import RolloutShape, rollout_shape
from ..job.prompt_source import PromptItem
from ..job.scoring import SampleScorer
from ..rl.settings import ObjectiveSettings
from .objective import group_advantages
from .step_timing import host_load_1m


def sampler_config(live: LiveConfig, shape: RolloutShape | None = None) -> SamplerConfig:
    """A KV cache with a row per sample of a whole batch and room for the longest sequence."""
    shape = shape or rollout_shape(live)
    return SamplerConfig(
        max_batch_size=live.samples_per_step,
        max_seq_len=shape.max_prompt_tokens + live.max_response_tokens,
    )


def sampling_params(live: LiveConfig, shape: RolloutShape | None = None) -> SamplingParams:
    shape = shape or rollout_shape(live)
    return SamplingParams(
        temperature=live.temperature,
        top_p=live.top_p,
        max_new_tokens=live.max_response_tokens,
        eos_token_id=shape.eos_token_id,
        seed=live.seed,
    )


@dataclass(frozen=True)
class RolloutReport:
    """One replica's part of one batch."""

    worker_id: int
    batch_id: int
    weights_version: int
    wall_s: float
    samples: list[RolloutSample]
    engine_s: float | None = None
    """The engine's own generate call (the rest of wall_s is requests and scoring)."""
    decode_iterations: int | None = None
    """Engine steps the call took (None: the engine does not count them)."""
    host_load_1m: float | None = None
    """The host's one-minute load average when the call started."""


class RolloutRole:
    """One rollout replica. Built on the worker's model; dropped when the worker changes role."""

    def __init__(
        self,
        *,
        worker_id: int,
        model: PreTrainedModel,
        scorer: SampleScorer,
        sampler: SamplerConfig,
        params: SamplingParams,
        samples_per_prompt: int,
        weights_version: int,
        engine: RolloutEngine | None = None,
        weights_digest: str | None = None,
    ) -> None:
        """`engine`: the worker's running engine, holding the weights `weights_digest` names;
        None builds the project's sampler over `model`."""
        self.worker_id = worker_id
        self.model = model
        self.scorer = scorer
        self.params = params
        self.samples_per_prompt = samples_per_prompt
        if engine is None:
            sampler_engine = KVCacheSampler(model, sampler)
            sampler_engine.warmup(params)
            engine = sampler_engine
        self.engine = engine
        self.weights_version = weights_version
        self.weights_digest = weights_digest

    def load_weights(
        self, flat: torch.Tensor, *, weights_version: int, weights_digest: str | None = None
    ) -> None:
        """Take the weights of `weights_version` (a standalone replica loads them into its
        sampler; a worker's replica is told the digest its engine loaded)."""
        if isinstance(self.engine, KVCacheSampler):
            self.engine.load_weights(flat.to(self.engine.device))
        self.weights_version = weights_version
        self.weights_digest = weights_digest

    def generate(self, *, batch_id: int, items: list[PromptItem]) -> RolloutReport:
        """Generate and score every sample of the given prompts of batch `batch_id`."""
        start = time.perf_counter()
        load = host_load_1m()
        by_id = {item.prompt_id: item for item in items}
        requests = [
            GenerationRequest(
                prompt_id=item.prompt_id, sample_index=i, prompt_token_ids=item.prompt_token_ids
            )
            for item in items
            for i in range(self.samples_per_prompt)
        ]
        output = self.engine.generate(requests, self.params, step=batch_id)
        samples = []
        for result in output.results:
            item = by_id[result.prompt_id]
            score = self.scorer.score(
                item,
                result.token_ids,
                finished=result.finish_reason is not FinishReason.LENGTH,
                sample_index=result.sample_index,
            )
            samples.append(
                RolloutSample(
                    batch_id=batch_id,
                    prompt_id=result.prompt_id,
                    sample_index=result.sample_index,
                    prompt_token_ids=item.prompt_token_ids,
                    response_token_ids=tuple(result.token_ids),
                    reward=score.reward,
                    hit_length_cap=result.finish_reason is FinishReason.LENGTH,
                    finish_s=result.finish_s,
                    generated_by_device=self.worker_id,
                    weights_version=self.weights_version,
                    weights_digest=self.weights_digest,
                    engine_logprobs=result.logprobs,
                    data_source=item.data_source,
                    extra_info_index=item.extra_info_index,
                )
            )
        return RolloutReport(
            worker_id=self.worker_id,
            batch_id=batch_id,
            weights_version=self.weights_version,
            wall_s=time.perf_counter() - start,
            samples=samples,
            engine_s=output.wall_s,
            decode_iterations=len(output.active_batch_per_step) or None,
            host_load_1m=load,
        )


def collect_batch(
    batch_id: int, reports: Mapping[int, RolloutReport], *, objective: ObjectiveSettings
) -> RolloutBatch:
    """One step's batch from its replicas' reports (by worker id), with group advantages.

    Samples are ordered by (prompt id, sample index), so however the prompts were split over
    replicas and in whatever order the reports arrive, the same samples give the same batch.
    """
    samples = sorted((s for r in reports.values() for s in r.samples), key=lambda s: s.key)
    versions = {r.weights_version for r in reports.values()}
    if len(versions) != 1:
        raise RuntimeError(f"batch {batch_id} was generated with weights versions {versions}")
    return RolloutBatch(
        batch_id=batch_id,
        weights_version=versions.pop(),
        samples=group_advantages(samples, settings=objective),
        rollout_s=max(r.wall_s for r in reports.values()),
        replica_s={w: r.wall_s for w, r in reports.items()},
        replicas=[replica_step(r) for _, r in sorted(reports.items())],
    )


def replica_step(report: RolloutReport) -> RolloutReplicaStep:
    """The trace's record of one replica's part of a batch."""
    return RolloutReplicaStep(
        worker_id=report.worker_id,
        wall_s=report.wall_s,
        engine_s=report.engine_s,
        decode_iterations=report.decode_iterations,
        samples=len(report.samples),
        response_tokens=sum(len(s.response_token_ids) for s in report.samples),
        host_load_1m=report.host_load_1m,
    )
