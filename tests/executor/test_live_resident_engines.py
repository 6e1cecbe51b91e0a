"""Resident rollout engines: every worker builds its engine once, at setup, and keeps it through
role changes, so a resize that adds replicas starts none; the run's data and training are those
of the same run with engines started on demand."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from dynaresize.executor.config import LiveConfig, RolloutEngines
from dynaresize.executor.testing.harness import live_session
from dynaresize.executor.worker.actor import LiveWorker
from dynaresize.executor.worker.shards import full_vectors
from dynaresize.traces.io import read_trace

pytestmark = [pytest.mark.live, pytest.mark.timeout(900)]

# One worker goes to Training and comes back twice: on demand it starts an engine each time.
SCHEDULE = "1@3:1;2@2:2;3@3:1;4@2:2"


def _run(out, engines: RolloutEngines, device: str):
    config = LiveConfig.model_validate(
        {
            "device": device,
            **({"num_gpus": 1} if device == "cuda" else {}),
            "model": {"preset": "tiny"},
            "num_workers": 4,
            "initial_allocation": "2:2",
            "candidate_allocations": ["3:1", "2:2"],
            "num_steps": 6,
            "prompts_per_step": 4,
            "samples_per_prompt": 4,
            "max_response_tokens": 16,
            "micro_batch_samples": 8,
            "optimizer": {"lr": 1e-3},
            "pipeline": "sync",
            "resize_strategy": "overlapped",
            "rollout_engines": engines.value,
            "policy": {"kind": "scheduled", "schedule": SCHEDULE},
            "checkpoint_every_steps": None,
        }
    )
    with live_session(config, out) as session:
        session.run()
        rt = session.runtime
        built = {
            w: info["rollout_engines_built"]
            for w, info in rt.call(rt.all_ids, LiveWorker.info).wait("test").items()
        }
        shards = rt.call(rt.roles.trainer_ids, LiveWorker.export_shard).wait("test export")
        state = full_vectors(list(shards.values()))
    return built, state, read_trace(out / "trace")


def _cuda_available() -> bool:
    return torch.cuda.is_available()


@pytest.fixture(
    scope="module",
    params=[
        "cpu",
        # on CUDA the engines replay captured decode graphs: a parked engine's graphs must
        # still read the weights training has since written in place
        pytest.param("cuda", marks=pytest.mark.skipif(not _cuda_available(), reason="needs CUDA")),
    ],
)
def both_runs(request, tmp_path_factory, _ray_started):
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1")
    return {
        engines: _run(tmp_path_factory.mktemp(engines.value), engines, request.param)
        for engines in (RolloutEngines.ON_DEMAND, RolloutEngines.RESIDENT)
    }


def test_resident_engines_are_built_once_per_worker_and_on_demand_ones_again(both_runs) -> None:
    on_demand, _, demand_trace = both_runs[RolloutEngines.ON_DEMAND]
    resident, _, resident_trace = both_runs[RolloutEngines.RESIDENT]
    # once on every worker that is or may become a replica; workers 0 and 1 train under every
    # candidate split, so they never build one
    assert resident == {0: 0, 1: 0, 2: 1, 3: 1}
    assert max(on_demand.values()) >= 2  # the worker that came back started a second engine
    for trace in (demand_trace, resident_trace):
        assert sorted(trace.resizes.resize_id.unique()) == [0, 1, 2, 3]


def test_resident_engines_generate_the_same_samples_and_train_to_the_same_state(both_runs):
    _, demand_state, demand_trace = both_runs[RolloutEngines.ON_DEMAND]
    _, resident_state, resident_trace = both_runs[RolloutEngines.RESIDENT]
    columns = ["step", "sample_index", "response_tokens"]
    pd.testing.assert_frame_equal(
        demand_trace.samples[columns].sort_values(columns[:2]).reset_index(drop=True),
        resident_trace.samples[columns].sort_values(columns[:2]).reset_index(drop=True),
    )
    for key in ("master", "exp_avg", "exp_avg_sq"):
        torch.testing.assert_close(resident_state[key], demand_state[key], msg=key)
