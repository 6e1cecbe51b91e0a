"""A live worker's rollout engine across its role changes: built, released, rebuilt, closed.

The engine outlives the Rollout role: a worker that becomes a trainer releases it as the run's
`rollout_engine.release` says (`destroy`: the engine is dropped, an engine process keeps its
imports; `sleep`: vLLM parks it on the device; `keep`: nothing happens), and a worker that returns
starts, rebuilds or wakes it (the `rollout_reinit` phase), then hands it the current weights.

The weights a replica generates with are the worker's own model's: an in-process engine (own
sampler, HF `generate`) computes with the model's tensors, so loading into the model is loading
into the engine; an engine in a process of its own (vLLM) is given the model's flat weights after
every start and every weight sync, and the model is kept current beside it, so the worker can
become a trainer at any boundary. Every load yields the digest of what the engine loaded
(`rl.weights_digest`; an engine process computes it on its side of the shared memory), which the
samples carry into the lineage records.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import torch
from transformers import PreTrainedModel

from ..config import LiveConfig
from ..engines.build import EngineShape, ManagedEngine, build_engine
from ..engines.config import EngineRelease
from ..engines.device_share import fill_flat
from ..engines.interface import SamplingParams
from ..engines.process import EngineProcess
from ..job.live_job import rollout_shape
from ..rl.task import TOKENIZER
from ..rl.weights_digest import parameters_digest, weights_digest


def engine_shape(live: LiveConfig) -> EngineShape:
    """One step's samples in one call, room for the longest prompt plus a full response."""
    return EngineShape(
        max_batch_size=live.samples_per_step,
        max_seq_len=rollout_shape(live).max_prompt_tokens + live.max_response_tokens,
        pad_token_id=TOKENIZER.pad_token_id,
    )


def flat_model_weights(model: PreTrainedModel) -> torch.Tensor:
    """The model's weights in `parameters()` order as one host vector of the model's dtype
    (what the weight sync broadcasts, and what an engine process loads)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()


def loaded_digest(engine: ManagedEngine, flat: torch.Tensor) -> str:
    """The digest of what `engine` last loaded: the engine process's own reading of the shared
    buffer when it has one, else the digest of `flat` (an in-process engine computes with the
    very tensors `flat` was copied into)."""
    if isinstance(engine, EngineProcess) and engine.last_load is not None:
        return engine.last_load.digest
    return weights_digest(flat)


class WorkerEngine:
    """The rollout engine of one worker, and its lifecycle over the run."""

    def __init__(self, live: LiveConfig, *, worker_id: int, params: SamplingParams) -> None:
        self.config = live.rollout_engine
        self.live = live
        self.worker_id = worker_id
        self.params = params
        self.engine: ManagedEngine | None = None
        self.starts = 0
        """Engine starts, rebuilds and wakes (what a resident engine saves)."""
        self.in_rollout = False
        self.start_timings: list[dict[str, float]] = []
        """Each engine process start split into process, imports and engine build (seconds);
        in-process engines report their build as `engine_s`."""
        self._scratch: Path | None = None

    @property
    def in_child_process(self) -> bool:
        return self.config.in_child_process

    def prebuild(self, model: PreTrainedModel) -> float:
        """`release: keep` or `sleep`: build the engine now (at setup, on a trainer), so that
        no resize starts one; with `sleep` it is put to sleep at once, so a move into Rollout
        is a wake and a weight load. Seconds taken, 0 where one is built already."""
        held = (EngineRelease.KEEP, EngineRelease.SLEEP)
        if self.config.release not in held or self.engine is not None:
            return 0.0
        seconds = self._start(model)
        if self.config.release is EngineRelease.SLEEP:
            assert self.engine is not None
            seconds += self.engine.release()
        return seconds

    def acquire(self, model: PreTrainedModel) -> tuple[ManagedEngine, str]:
        """The engine, running and holding `model`'s weights, for a worker becoming a replica;
        with the digest of the weights it holds."""
        if self.engine is None:
            self._start(model)
        elif not self.engine.is_running:
            self.engine.rebuild()
            self.starts += 1
        engine = self.engine
        assert engine is not None
        self.in_rollout = True
        if not self.in_child_process:
            # the engine computes with the model's own tensors: fingerprint them in place (a
            # host copy of the whole model would cost seconds on a GPU at every resize)
            return engine, parameters_digest(model.parameters())
        if isinstance(engine, EngineProcess):
            # the model's weights straight into the buffer the engine process maps (on CUDA a
            # device buffer): no host copy of the model on a resize's path
            parameters = list(model.parameters())
            numel = sum(p.numel() for p in parameters)
            first = parameters[0]
            flat = fill_flat(engine.staging_tensor(numel, first.dtype, first.device), parameters)
        else:
            flat = flat_model_weights(model)
        engine.load_weights(flat)
        return engine, loaded_digest(engine, flat)

    def load(self, model: PreTrainedModel, flat: torch.Tensor) -> str:
        """New weights for a replica: into the engine, and into the model beside an engine
        process; the digest of what the engine loaded."""
        engine = self._running()
        engine.load_weights(flat.to(next(model.parameters()).device))
        if self.in_child_process:
            from ..rl.model import load_flat_parameters

            load_flat_parameters(model, flat)
        return loaded_digest(engine, flat)

    def release(self) -> float:
        """The worker leaves Rollout: release the engine as configured; seconds taken (0 when
        it is kept, or when it was released already)."""
        if not self.in_rollout:
            return 0.0
        self.in_rollout = False
        if self.engine is None or self.config.release is EngineRelease.KEEP:
            return 0.0
        return self.engine.release()

    def close(self) -> None:
        """End the engine (and its process) and remove the scratch folder; safe to repeat."""
        engine, self.engine = self.engine, None
        self.in_rollout = False
        try:
            if engine is not None:
                engine.close()
        finally:
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)
                self._scratch = None

    def _start(self, model: PreTrainedModel) -> float:
        if self.in_child_process and self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix=f"dynaresize-engine-w{self.worker_id}-"))
        engine = build_engine(
            self.config,
            model,
            shape=engine_shape(self.live),
            name=f"w{self.worker_id}",
            scratch_dir=self._scratch or Path(tempfile.gettempdir()),
            model_path=None,
            warmup=self.params,
        )
        self.engine = engine
        self.starts += 1
        timing = getattr(engine, "start_timing", None)
        self.start_timings.append(
            dataclasses.asdict(timing) if timing is not None else {"engine_s": engine.start_s}
        )
        return engine.start_s

    def _running(self) -> ManagedEngine:
        if self.engine is None or not self.engine.is_running:
            raise RuntimeError(f"worker {self.worker_id}: its rollout engine is not running")
        return self.engine


class WeightsMismatchError(RuntimeError):
    """A replica's engine holds other weights than the first trainer sent."""


def check_sync_digests(results: dict[int, dict], *, weights_version: int) -> str | None:
    """The digest every replica's engine reports after a weight sync must be the one the
    sending trainer computed; returns it (None where no engine reported one)."""
    sent = [r["digest"] for r in results.values() if r.get("source")]
    if not sent or sent[0] is None:
        return None
    wrong = {
        w: r["digest"]
        for w, r in results.items()
        if not r.get("source") and r.get("digest") is not None and r["digest"] != sent[0]
    }
    if wrong:
        raise WeightsMismatchError(
            f"weights version {weights_version}: the first trainer sent digest {sent[0]}, "
            f"replicas loaded {dict(sorted(wrong.items()))}"
        )
    return str(sent[0])
