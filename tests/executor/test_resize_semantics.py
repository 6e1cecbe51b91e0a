"""A resize changes nothing a run computes, for every strategy: the same seed with and without a
resize gives the same samples and the same trainer state (master weights and both AdamW moments).

One session of 3 CPU workers is set up once; each strategy then trains 3 steps from the same
initial state (sync pipeline), resizing 2:1 -> 1:2 after step 0 and back after step 1, and is
compared with the reference that trains 3 steps on 2:1 without resizing. The moments are compared
by relative error of the whole vector (a zeroed moment is off by 1, a moment one step stale by far
more than the 1e-3 allowed), since most `exp_avg_sq` entries are far below any useful atol.

Time: one setup plus 8 short runs of 3 steps (tiny model, 2 prompts x 2 samples); the
stop_and_rebuild case restarts the workers twice. About 85 s on 2 loaded cores (35 s setup).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from dynaresize.executor.config import LiveConfig, OverlappedMechanisms
from dynaresize.policies.types import Allocation
from tests.state_bound import STATE_RELATIVE_ERROR_BOUND, relative_error

pytestmark = [pytest.mark.live, pytest.mark.timeout(900)]

STEPS = 3
RESIZE_AFTER = {0: "1:2", 1: "2:1"}
CONFIG = LiveConfig.model_validate(
    {
        "num_workers": 3,
        "initial_allocation": "2:1",
        "candidate_allocations": ["2:1", "1:2"],
        "num_steps": STEPS,
        "prompts_per_step": 2,
        "samples_per_prompt": 2,
        "max_response_tokens": 8,
        "pipeline": "sync",
        "optimizer": {"lr": 1e-2},
        "checkpoint_every_steps": None,
        "staging": {"chunk_mib": 1, "num_buffers": 2},
    }
)

OVERLAPPED_SWITCHES = [
    {},
    {"reuse_communicators": False, "staging": False, "defer_optimizer": False},
    {"reuse_communicators": False},
    {"staging": False},
    {"defer_optimizer": False},
]


def _strategies():
    from dynaresize.executor.strategies.host_sync import HostSyncStrategy
    from dynaresize.executor.strategies.overlapped import OverlappedStrategy
    from dynaresize.executor.strategies.stop_and_rebuild import StopAndRebuildStrategy

    cases = {"host_sync": HostSyncStrategy}
    for switches in OVERLAPPED_SWITCHES:
        mechanisms = OverlappedMechanisms(**switches)
        cases[f"overlapped:{mechanisms.label}"] = lambda m=mechanisms: OverlappedStrategy(m)
    cases["stop_and_rebuild"] = StopAndRebuildStrategy
    return cases


@pytest.fixture(scope="module")
def session(tmp_path_factory, _ray_started):
    import ray

    from dynaresize.executor.testing.harness import live_session

    if not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1")
    out = tmp_path_factory.mktemp("semantics")
    with live_session(CONFIG, out) as live:
        yield live, _trainer_state(live)


def _trainer_state(session) -> dict[str, torch.Tensor]:
    from dynaresize.executor.worker.actor import LiveWorker
    from dynaresize.executor.worker.shards import full_vectors

    rt = session.runtime
    shards = rt.call(rt.roles.trainer_ids, LiveWorker.export_shard).wait("test export")
    return full_vectors(list(shards.values()))


def _reset(session, initial: dict[str, torch.Tensor]) -> None:
    """Every worker back to the initial weights, the optimizer before its first step."""
    from dynaresize.executor.roles import RoleMap
    from dynaresize.executor.worker.actor import LiveWorker
    from dynaresize.executor.worker.shards import ShardLayout, shards_from_full

    rt = session.runtime
    assert rt.roles == RoleMap.for_allocation(CONFIG.initial_allocation)
    layout = ShardLayout(numel=initial["master"].numel(), num_ranks=rt.roles.num_trainers)
    shards = shards_from_full(initial, layout, optimizer_step=0)
    rt.call_each(
        rt.call([w], LiveWorker.load_shard, shards[rt.roles.trainer_rank(w)])
        for w in rt.roles.trainer_ids
    ).wait("test reset")
    rt.call(rt.roles.trainer_ids, LiveWorker.refresh_model_from_master).wait("test gather")
    rt.weights_version = 0
    rt.call(rt.roles.sync_ids, LiveWorker.sync_weights, weights_version=0).wait("test sync")


def _train(session, initial, strategy, resizes: dict[int, str]):
    """STEPS steps from the initial state with `strategy` resizing after the given steps;
    the samples of every batch and the trainer state at the end."""
    from dynaresize.executor.job.live_job import prepare_prompt_source
    from dynaresize.executor.roles import RoleMap
    from dynaresize.executor.run_folder.run_log import RunLog
    from dynaresize.traces.schema import RunMeta

    _reset(session, initial)
    session.prompts = prepare_prompt_source(session.live)  # batch 0 again, as a new run draws
    rt = session.runtime
    session.strategy = strategy
    # each run records into a folder of its own (a trace's steps run forward)
    session.log.recorder.close()
    session.out = Path(tempfile.mkdtemp(prefix="run", dir=session.out.parent))
    session.log = RunLog(session.out, meta=RunMeta(source="executor"), restored=None)
    batches = []
    for step in range(STEPS):
        rt.step = step
        batch, _ = session._step(step, None)
        strategy.after_step(rt)
        strategy.pop_background_phases()
        batches.append([(s.key, s.response_token_ids, s.reward) for s in batch.samples])
        if step in resizes:
            strategy.resize(rt, target=RoleMap.for_allocation(Allocation.parse(resizes[step])))
    state = _trainer_state(session)
    assert rt.roles.allocation == CONFIG.initial_allocation
    return batches, state


def test_every_strategy_resizes_without_changing_samples_or_trainer_state(session) -> None:
    live, initial = session
    from dynaresize.executor.strategies.host_sync import HostSyncStrategy

    ref_batches, ref_state = _train(live, initial, HostSyncStrategy(), {})
    assert (
        ref_state["exp_avg_sq"].norm() > 0
        and relative_error(ref_state["master"], initial["master"]) > 1e-4
    )  # the reference did train
    failures = []
    for name, make in _strategies().items():
        strategy = make()
        batches, state = _train(live, initial, strategy, RESIZE_AFTER)
        release = getattr(strategy, "release", None)
        if release is not None:
            release(live.runtime)
        if batches != ref_batches:
            failures.append(f"{name}: samples differ")
        for key in ("master", "exp_avg", "exp_avg_sq"):
            error = relative_error(state[key], ref_state[key])
            if not error < STATE_RELATIVE_ERROR_BOUND:
                failures.append(f"{name}: {key} relative error {error:.2e}")
    assert not failures, failures


def test_the_moment_comparison_fails_a_zeroed_or_stale_moment() -> None:
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(10_000, generator=gen) * 1e-3 for _ in range(3)]
    v = torch.zeros(10_000)
    history = []
    for g in grads:
        v = 0.999 * v + 0.001 * g * g
        history.append(v.clone())
    assert (history[-1] < 1e-6).float().mean() > 0.99  # an atol of 1e-6 would accept anything
    assert relative_error(history[-1], history[-1]) < 1e-3
    assert relative_error(torch.zeros_like(v), history[-1]) >= 1e-3
    assert relative_error(history[-2], history[-1]) >= 1e-3
