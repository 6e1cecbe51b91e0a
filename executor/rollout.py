"""The Rollout role: the RL core's sampler on one worker, fed weights by the trainers every step.

A replica generates every sample of the prompts the driver assigns it. Prompts are drawn from
(seed, batch id) and each sample is seeded by (step, prompt id, sample index), so which replica
generates a sample does not change its tokens (up to the numerics the sampler documents), and a
resize that changes the number of replicas does not change the data.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from .batch import RolloutBatch, RolloutSample
from .config import LiveConfig
from .objective import group_advantages
from .rl.engine import FinishReason, GenerationRequest, SamplingParams
from .rl.sampler import KVCacheSampler, SamplerConfig
from .rl.settings import ObjectiveSettings
from .rl.task import TOKENIZER, RepeatTask
from .rl.weights_digest import parameters_digest


def sampler_config(live: LiveConfig) -> SamplerConfig:
    """A KV cache with a row per sample of a whole batch and room for the longest sequence."""
    return SamplerConfig(
        max_batch_size=live.samples_per_step,
        max_seq_len=live.max_prompt_tokens() + live.max_response_tokens,
    )


def sampling_params(live: LiveConfig) -> SamplingParams:
    return SamplingParams(
        temperature=live.temperature,
        top_p=live.top_p,
        max_new_tokens=live.max_response_tokens,
        eos_token_id=TOKENIZER.eos_token_id,
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


class RolloutRole:
    """One rollout replica. Built on the worker's model; dropped when the worker changes role."""

    def __init__(
        self,
        *,
        worker_id: int,
        model: PreTrainedModel,
        task: RepeatTask,
        sampler: SamplerConfig,
        params: SamplingParams,
        samples_per_prompt: int,
        weights_version: int,
    ) -> None:
        self.worker_id = worker_id
        self.model = model
        self.task = task
        self.params = params
        self.samples_per_prompt = samples_per_prompt
        self.engine = KVCacheSampler(model, sampler)
        self.engine.warmup(params)
        self.weights_version = weights_version

    def load_weights(self, flat: torch.Tensor, *, weights_version: int) -> None:
        self.engine.load_weights(flat.to(self.engine.device))
        self.weights_version = weights_version

    def generate(
        self, *, batch_id: int, prompt_ids: list[int], seed: int, num_prompts: int
    ) -> RolloutReport:
        """Generate and score every sample of the given prompts of batch `batch_id`."""
        start = time.perf_counter()
        # The fingerprint of the weights this batch is generated with, taken from the model
        # itself: the lineage check compares it with what the trainer published.
        digest = parameters_digest(self.model.parameters())
        items = {
            item.prompt_id: item
            for item in self.task.sample_items(seed=seed, step=batch_id, num_prompts=num_prompts)
        }
        missing = [p for p in prompt_ids if p not in items]
        if missing:
            raise ValueError(f"prompt ids {missing[:5]} are not in batch {batch_id}")
        requests = [
            GenerationRequest(
                prompt_id=p, sample_index=i, prompt_token_ids=items[p].prompt_token_ids
            )
            for p in prompt_ids
            for i in range(self.samples_per_prompt)
        ]
        output = self.engine.generate(requests, self.params, step=batch_id)
        samples = []
        for result in output.results:
            item = items[result.prompt_id]
            score = self.task.score(item, result.token_ids)
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
                    weights_digest=digest,
                )
            )
        return RolloutReport(
            worker_id=self.worker_id,
            batch_id=batch_id,
            weights_version=self.weights_version,
            wall_s=time.perf_counter() - start,
            samples=samples,
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
    )
