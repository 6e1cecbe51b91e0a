"""Shipped CSV mappings for the metric names slime, OpenRLHF and AReaL log.

The names come from each framework's logging code; what each measures is in docs/importers.md.
A mapping is a plain `CsvMapping`: copy one with `model_copy(update=...)` to add a column a run
logged under another name (a response-length metric, for instance).
"""

from __future__ import annotations

from ..schema import PipelineMode
from .csv import CsvMapping

SLIME = CsvMapping(
    name="slime",
    pipeline_mode=PipelineMode.ONE_STEP_OFF,
    rollout_s="perf/rollout_time",
    train_s="perf/actor_train_time",
    wait_s="perf/train_wait_time",
    step_s="perf/step_time",
    response_len_mean="rollout/response_len/mean",
    response_len_max="rollout/response_len/max",
    meaning={
        "perf/rollout_time": "wall time of generating one rollout batch",
        "perf/train_wait_time": "time the trainer waited for that batch (async training)",
    },
)

OPENRLHF = CsvMapping(
    name="openrlhf",
    pipeline_mode=PipelineMode.SYNC,
    rollout_s="timing/generation",
    train_s="timing/ppo_train",
    sync_s="timing/broadcast",
    meaning={
        "timing/generation": "vLLM generation of the step's samples",
        "timing/ppo_train": "actor (and critic) PPO updates",
        "timing/broadcast": "weight broadcast from the trainers to the vLLM engines",
    },
)

AREAL = CsvMapping(
    name="areal",
    pipeline_mode=PipelineMode.ASYNC,
    wait_s="timeperf/rollout",
    train_s="timeperf/train_step",
    sync_s="timeperf/update_weights",
    meaning={
        "timeperf/rollout": "time the trainer spent getting a batch from the always-running "
        "rollout workers (a wait, not the generation time)",
    },
)

SHIPPED_MAPPINGS: dict[str, CsvMapping] = {m.name: m for m in (SLIME, OPENRLHF, AREAL)}
