"""The per-step path's bounds and shortcuts: the measured-cost window an observation carries (in
the twin and the live observer alike), and the per-process context cache of `build_context`."""

from __future__ import annotations

import numpy as np
import pytest

from dynaresize.config import load_run_config
from dynaresize.executor.config import LiveConfig
from dynaresize.executor.observe.observer import Observer
from dynaresize.policies.types import Decision, StepObservation
from dynaresize.twin import context_cache
from dynaresize.twin.config import ScenarioConfig
from dynaresize.twin.simulation import build_context, simulate


class _Flipper:
    """Resizes at every boundary between the first two candidates, keeping what it saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, ...]] = []

    def reset(self) -> None:
        self.seen = []

    def decide(self, obs: StepObservation) -> Decision:
        self.seen.append(obs.measured_resize_costs_s)
        first, second = obs.candidate_allocations()[:2]
        return Decision.resize(second if obs.allocation == first else first, "flip")


def _scenario(num_steps: int, window: int | None = None) -> ScenarioConfig:
    data = load_run_config("example").model_dump(mode="json")
    data.pop("live"), data.pop("output")
    data["simulation"]["num_steps"] = num_steps
    if window is not None:
        data["simulation"]["measured_resize_costs_window"] = window
    return ScenarioConfig.model_validate(data)


def test_a_window_of_one_carries_the_last_measured_cost_only():
    one, unbounded = _Flipper(), _Flipper()
    simulate(_scenario(30, window=1), one)
    simulate(_scenario(30, window=1000), unbounded)
    assert one.seen == [long[-1:] for long in unbounded.seen]
    assert max(len(seen) for seen in unbounded.seen) > 1


def test_a_resize_at_every_step_sees_the_window_of_the_full_history():
    """Bounded at the window, and exactly the newest costs of an unbounded run, oldest first;
    the runs themselves are the same (the window changes what is carried, not what happens)."""
    bounded, unbounded = _Flipper(), _Flipper()
    small = simulate(_scenario(120, window=8), bounded)
    full = simulate(_scenario(120, window=1000), unbounded)
    assert len(unbounded.seen[-1]) == len(full.resizes["resize_id"].unique()) - 1
    assert max(len(seen) for seen in bounded.seen) == 8
    for short, long in zip(bounded.seen, unbounded.seen, strict=True):
        assert short == long[-8:]
    assert small.steps.equals(full.steps)
    assert small.decisions.equals(full.decisions)


def test_the_default_window_is_the_documented_one():
    assert _scenario(5).simulation.measured_resize_costs_window == 64
    assert LiveConfig().measured_resize_costs_window == 64


def test_the_live_observer_keeps_the_newest_measured_costs(tmp_path):
    live = LiveConfig(measured_resize_costs_window=3)
    observer = Observer(
        live,
        num_params=10_000,
        setup_timings_s={},
        setup_parts=(),
        costs_path=None,
        scenario=None,
    )
    for value in (5.0, 6.0, 7.0, 8.0, 9.0):
        observer.resized(value, predicted_s=5.0, out=tmp_path)
    assert tuple(observer.measured_resize_s) == (7.0, 8.0, 9.0)
    assert (tmp_path / "resize_prior.json").exists()  # written at the first one only


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.delenv(context_cache.NO_CONTEXT_CACHE_ENV, raising=False)
    context_cache.clear_context_cache()
    yield
    context_cache.clear_context_cache()


def test_a_scenario_asked_again_gets_its_kept_context(fresh_cache):
    config = _scenario(30)
    first = build_context(config)
    assert build_context(config) is first
    assert build_context(config, costs=config.costs) is first  # its own costs, passed
    assert build_context(config, seed=config.simulation.seed + 1) is not first
    config.simulation.num_steps = 20  # changed in place: its own context, not the kept one
    assert build_context(config).workload.num_steps == 20
    config.simulation.num_steps = 30
    again = _scenario(30)  # an equal config, another object: the same context, its config
    kept = build_context(again)
    assert kept.config is again and kept.step_costs is first.step_costs
    with pytest.raises(ValueError, match="read-only"):
        first.workload.response_tokens[0] = 1
    with pytest.raises(ValueError, match="read-only"):
        first.step_costs.rollout_s[0, 0] = 1.0


def test_the_kept_context_equals_a_fresh_one(fresh_cache, monkeypatch):
    config = _scenario(40)
    kept = build_context(config)
    monkeypatch.setenv(context_cache.NO_CONTEXT_CACHE_ENV, "1")
    fresh = build_context(config)
    assert fresh is not kept
    for name in ("rollout_s", "train_s", "sync_s", "step_s"):
        assert np.array_equal(getattr(fresh.step_costs, name), getattr(kept.step_costs, name))
    assert np.array_equal(fresh.predicted_step_s, kept.predicted_step_s)
    assert fresh.step_stats.equals(kept.step_stats)


def test_other_costs_or_workloads_are_not_taken_for_the_kept_one(fresh_cache):
    config = _scenario(30)
    kept = build_context(config)
    slower = config.costs.model_copy(
        update={"train": config.costs.train.model_copy(update={"first_step_warmup_s": 99.0})}
    )
    other = build_context(config, costs=slower)
    assert other is not kept and other.step_costs.train_s[0, 0] > kept.step_costs.train_s[0, 0]
    given = build_context(config, workload=kept.workload)  # a workload passed in: built
    assert given is not kept and build_context(config, workload=kept.workload) is not given
