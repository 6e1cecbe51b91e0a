"""Traces with known cost parameters, for the fitting, break-even and replay tests.

Step times come from the twin's own cost models on a synthetic workload, plus optional noise,
so a fit must recover the parameters that made them; `with_phase_updates` changes the resize
phases such parameters hold. Not a test module itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dynaresize.traces.io import Trace
from dynaresize.traces.phases import PhaseName, StrategyName
from dynaresize.traces.schema import RunMeta
from dynaresize.traces.workload import Workload
from dynaresize.twin.costs import CostModels
from dynaresize.twin.costs.memory import ModelConfig
from dynaresize.twin.costs.resize import ResizeCostParams
from dynaresize.twin.costs.rollout import rollout_stage_s_many
from dynaresize.twin.costs.sync import weight_sync_s
from dynaresize.twin.costs.train import train_stage_s


def lognormal_workload(
    num_steps: int, samples_per_step: int, *, seed: int = 0, growth: float = 0.0
) -> Workload:
    """Long-tailed response lengths; `growth` scales lengths up linearly over the run."""
    rng = np.random.default_rng(seed)
    scale = 1.0 + growth * np.arange(num_steps) / max(num_steps - 1, 1)
    prompts = [rng.integers(100, 1000, samples_per_step) for _ in range(num_steps)]
    responses = [
        np.minimum(8192, (rng.lognormal(6.5, 0.9, samples_per_step) * s).astype(np.int64))
        for s in scale
    ]
    return Workload.from_steps(prompts, responses, name="synthetic")


def with_phase_updates(
    params: ResizeCostParams,
    strategy: StrategyName,
    updates: dict[PhaseName, dict[str, Any]],
) -> ResizeCostParams:
    """`params` with the given fields of some phases of one strategy's own table changed."""
    table = dict(getattr(params, strategy.value))
    for phase, fields in updates.items():
        table[phase] = table[phase].model_copy(update=fields)
    return params.model_copy(update={strategy.value: table})


def trace_from_costs(
    workload: Workload,
    *,
    costs: CostModels,
    model: ModelConfig,
    train_gpus: np.ndarray | int,
    total_gpus: int = 8,
    sync_bandwidth_gbps: float = 400.0,
    noise: float = 0.0,
    seed: int = 0,
) -> Trace:
    """A one-step-off trace whose stage times are the cost models' (times 1 + noise * N(0,1))."""
    rng = np.random.default_rng(seed)
    n = workload.num_steps
    train = np.broadcast_to(np.asarray(train_gpus, dtype=np.int64), (n,)).copy()
    rollout = total_gpus - train
    tokens = workload.tokens_per_step()
    rollout_s = np.zeros(n)
    train_s = np.zeros(n)
    for g in np.unique(train):
        rows = train == g
        r_all = rollout_stage_s_many(
            workload, num_replicas=int(total_gpus - g), params=costs.rollout
        )
        rollout_s[rows] = r_all[rows]
        train_s[rows] = train_stage_s(
            tokens[rows], train_gpus=int(g), model=model, params=costs.train
        )
    if n:
        rollout_s[0] += costs.rollout.first_step_warmup_s
        train_s[0] += costs.train.first_step_warmup_s
    sync = weight_sync_s(
        weights_gb=model.weights_gb, bandwidth_gbps=sync_bandwidth_gbps, params=costs.sync
    )
    rollout_s *= 1 + noise * rng.standard_normal(n)
    train_s *= 1 + noise * rng.standard_normal(n)
    rollout_s, train_s = np.abs(rollout_s), np.abs(train_s)
    sync_s = np.full(n, sync)
    step_s = np.maximum(rollout_s, train_s) + sync_s
    end = np.cumsum(step_s)
    start = end - step_s
    responses = [workload.step(k)[1] for k in range(n)]
    steps = pd.DataFrame(
        {
            "schema_version": 1,
            "step": np.arange(n),
            "start_s": start,
            "end_s": end,
            "rollout_s": rollout_s,
            "train_s": train_s,
            "sync_s": sync_s,
            "step_s": step_s,
            "idle_train_gpu_s": train * (step_s - train_s),
            "idle_rollout_gpu_s": rollout * (step_s - rollout_s),
            "train_gpus": train,
            "rollout_gpus": rollout,
            "device_roles": [
                ["train"] * int(t) + ["rollout"] * int(r)
                for t, r in zip(train, rollout, strict=True)
            ],
            "resize_id": [None] * n,
            "rollout_batch_id": np.arange(n),
            "rollout_weights_version": np.maximum(0, np.arange(n) - 1),
            "num_samples": np.diff(workload.step_offsets),
            "tokens": tokens.astype(np.int64),
            "response_len_mean": [float(r.mean()) for r in responses],
            "response_len_p50": [float(np.median(r)) for r in responses],
            "response_len_p99": [float(np.percentile(r, 99)) for r in responses],
            "response_len_max": [float(r.max()) for r in responses],
        }
    )
    index = workload.step_index()
    position = np.arange(len(index)) - workload.step_offsets[index]
    samples = pd.DataFrame(
        {
            "schema_version": 1,
            "step": index,
            "sample_index": position,
            "prompt_tokens": workload.prompt_tokens,
            "response_tokens": workload.response_tokens,
            "rollout_replica": [None] * len(index),
            "device": [None] * len(index),
            "finish_s": [None] * len(index),
        }
    )
    meta = RunMeta(source="test", model_params_b=model.num_params_b, num_gpus=total_gpus)
    return Trace(meta=meta, steps=steps, samples=samples).validated(source="test")
