"""A worker's rollout engine across role changes (in-process engines: no Ray, a few seconds), the
weights digests a replica reports, the engine-vs-trainer logprob gap, and the config's
`rollout_engine` section with the older `rollout_engines` spelling.

The vLLM engine in a live run is covered by tests/executor/test_live_vllm.py."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from dynaresize.executor.config import LiveConfig, RolloutEngines
from dynaresize.executor.engines.config import EngineKind, EngineRelease
from dynaresize.executor.job.live_job import prepare_prompt_source, replica_scorer
from dynaresize.executor.rl.model import build_model, count_parameters
from dynaresize.executor.rl.weights_digest import weights_digest
from dynaresize.executor.run_folder.lineage import digest_problems
from dynaresize.executor.run_folder.records import LineageRecord
from dynaresize.executor.worker.engine import (
    WeightsMismatchError,
    WorkerEngine,
    check_sync_digests,
    flat_model_weights,
)
from dynaresize.executor.worker.rollout import (
    RolloutRole,
    collect_batch,
    sampler_config,
    sampling_params,
)
from dynaresize.executor.worker.shards import ShardLayout
from dynaresize.executor.worker.trainer import TrainerRole

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BASE = {
    "num_workers": 2,
    "initial_allocation": "1:1",
    "prompts_per_step": 2,
    "samples_per_prompt": 2,
    "max_response_tokens": 12,
    "micro_batch_samples": 4,
}


def live(**engine) -> LiveConfig:
    return LiveConfig.model_validate({**BASE, "rollout_engine": engine})


def test_the_section_and_the_old_spelling():
    assert live().rollout_engine.kind is EngineKind.OWN
    old = LiveConfig.model_validate({**BASE, "rollout_engines": "resident"})
    assert old.rollout_engine.release is EngineRelease.KEEP
    assert old.rollout_engines is RolloutEngines.RESIDENT
    assert live(kind="vllm").rollout_engines is RolloutEngines.ON_DEMAND
    with pytest.raises(ValidationError, match=r"give only rollout_engine\.release"):
        LiveConfig.model_validate(
            {**BASE, "rollout_engines": "resident", "rollout_engine": {"release": "keep"}}
        )
    with pytest.raises(ValidationError, match="release: sleep needs device cuda"):
        live(kind="vllm", release="sleep")
    # a worker reads the config from its JSON: every engine's section reads back
    for kind in EngineKind:
        config = live(kind=kind.value)
        assert LiveConfig.model_validate_json(config.model_dump_json()) == config


@pytest.mark.parametrize("kind", ["own", "hf"])
def test_an_engine_is_released_on_leaving_rollout_and_kept_with_keep(kind):
    model = build_model(live().model)
    config = live(kind=kind)
    slot = WorkerEngine(config, worker_id=1, params=sampling_params(config))
    engine, digest = slot.acquire(model)
    assert engine.is_running and slot.starts == 1
    assert digest == weights_digest(flat_model_weights(model))
    assert slot.release() >= 0 and not engine.is_running
    assert slot.release() == 0.0  # already released: nothing more to do
    slot.acquire(model)
    assert engine.is_running and slot.starts == 2  # rebuilt on return
    kept = live(kind=kind, release="keep")
    resident = WorkerEngine(kept, worker_id=1, params=sampling_params(kept))
    resident.prebuild(model)
    resident.acquire(model)
    resident.release()
    resident.acquire(model)
    assert resident.starts == 1 and resident.engine is not None and resident.engine.is_running
    slot.close()
    resident.close()


def test_a_replica_that_loaded_other_weights_stops_the_sync():
    sent = {"digest": "aa", "source": True}
    assert check_sync_digests({0: sent, 2: {"digest": "aa", "source": False}}, weights_version=3)
    with pytest.raises(WeightsMismatchError, match=r"version 3.*sent digest aa.*2: 'bb'"):
        check_sync_digests({0: sent, 2: {"digest": "bb", "source": False}}, weights_version=3)


def _lineage(version: int, digest: str, prompt_id: int) -> LineageRecord:
    return LineageRecord(
        step=version,
        rollout_batch_id=version,
        prompt_id=prompt_id,
        sample_index=0,
        generated_weights_version=version,
        generated_weights_digest=digest,
        generated_by_device=1,
        consumed_by_device=0,
        trainer_weights_version=version,
        response_tokens=3,
    )


def test_the_lineage_check_wants_one_digest_per_weights_version():
    same = [_lineage(0, "aa", 0), _lineage(0, "aa", 1), _lineage(1, "bb", 2)]
    assert digest_problems(same) == []
    split = [_lineage(0, "aa", 0), _lineage(0, "cc", 1)]
    assert digest_problems(split) == ["weights version 0 generated with digests ['aa', 'cc']"]


def test_the_trainer_reports_how_far_the_engine_logprobs_are_from_its_own():
    """Same weights on both sides: the own sampler's logprobs and the trainer's recomputation
    agree to float noise over every response token (a shifted alignment would not)."""
    config = live()
    model = build_model(config.model)
    slot = WorkerEngine(config, worker_id=1, params=sampling_params(config))
    engine, digest = slot.acquire(model)
    replica = RolloutRole(
        worker_id=1,
        model=model,
        scorer=replica_scorer(config),
        sampler=sampler_config(config),
        params=sampling_params(config),
        samples_per_prompt=config.samples_per_prompt,
        weights_version=0,
        engine=engine,
        weights_digest=digest,
    )
    report = replica.generate(batch_id=0, items=prepare_prompt_source(config).next_batch(0)[:2])
    batch = collect_batch(0, {1: report}, objective=config.objective)
    assert {s.weights_digest for s in batch.samples} == {digest}
    trainer_model = build_model(config.model).requires_grad_(True)
    trainer = TrainerRole(
        worker_id=0,
        model=trainer_model,
        device=torch.device("cpu"),
        settings=config.optimizer,
        objective=config.objective,
        micro_batch_samples=config.micro_batch_samples,
    )
    numel = count_parameters(trainer_model)
    trainer.bind(group=None, rank=0, layout=ShardLayout(numel=numel, num_ranks=1))
    trainer.load_weights(flat_model_weights(trainer_model).float(), optimizer_step=0)
    trainer.load_moments({})
    tokens = int(batch.response_lengths().sum())
    gap = trainer.train(batch.samples, num_batch_tokens=tokens).logprob_gap
    assert gap.tokens == tokens > 0
    assert gap.mean is not None and gap.mean < 1e-4
    slot.close()
