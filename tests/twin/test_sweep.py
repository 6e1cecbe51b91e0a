"""Sweeps: parameter parsing and expansion, overrides, results that match single runs,
determinism, resumption, shared baselines, the Ray path and the command line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dynaresize.cli import app
from dynaresize.config_io import ConfigError
from dynaresize.twin.config import ScenarioConfig
from dynaresize.twin.simulation import simulate
from dynaresize.twin.sweeps import plan_sweep, run_sweep
from dynaresize.twin.sweeps import sweep as sweep_module
from dynaresize.twin.sweeps import tasks as sweep_tasks
from dynaresize.twin.sweeps.space import (
    apply_overrides,
    grid_points,
    parse_param,
    parse_scalar,
    random_points,
)

SMALL = {
    "name": "small",
    "cluster": {
        "gpus_per_node": 4,
        "intra_node_bandwidth_gbps": 300,
        "gpu_memory_gb": 96,
        "candidate_allocations": ["3:1", "2:2", "1:3"],
        "initial_allocation": "3:1",
    },
    "model": {"num_params_b": 1},
    "workload": {"preset": "growing_lengths", "samples_per_step": 32},
    "simulation": {"num_steps": 40},
    "policies": [{"kind": "static"}, {"kind": "hysteresis"}, {"kind": "greedy"}],
}
NO_NUMBA = {"DYNARESIZE_NO_NUMBA": "1"}  # no kernel compilation in short-lived workers
GRID = ["policy.cooldown_steps=2,8", "policy.up_threshold=0.05,0.3"]


@pytest.fixture(scope="module")
def config() -> ScenarioConfig:
    return ScenarioConfig.model_validate(SMALL)


@pytest.fixture(autouse=True)
def _numpy_kernels(monkeypatch):
    monkeypatch.setenv("DYNARESIZE_NO_NUMBA", "1")


@pytest.fixture(scope="module")
def grid_table(config):
    return run_sweep(config, params=GRID, seeds=2, jobs=1, progress=False)


def test_values_keep_their_types():
    assert parse_scalar("5") == 5 and isinstance(parse_scalar("5"), int)
    assert parse_scalar("0.25") == 0.25
    assert parse_scalar("true") is True
    assert parse_scalar("6:2") == "6:2"  # not YAML's base-60 integer 362
    p = parse_param("policy.cooldown_steps=5,10,20")
    assert (p.path, p.values) == ("policy.cooldown_steps", (5, 10, 20))
    r = parse_param("policy.up_threshold=0.05..0.4")
    assert (r.low, r.high, r.is_range) == (0.05, 0.4, True)


@pytest.mark.parametrize(
    "text, message",
    [
        ("policy.cooldown_steps", "PATH=V1"),
        ("=1,2", "PATH=V1"),
        ("policy..x=1", "dotted path"),
        ("a.b=1,1", "twice"),
        ("a.b=3..1", "LOW <= HIGH"),
        ("a.b=x..y", "numbers"),
    ],
)
def test_bad_parameters_are_named(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_param(text)


def test_grid_is_the_full_product_in_order():
    points = grid_points([parse_param("a.x=1,2"), parse_param("a.y=p,q,r")])
    assert [(p["a.x"], p["a.y"]) for p in points] == [
        (1, "p"),
        (1, "q"),
        (1, "r"),
        (2, "p"),
        (2, "q"),
        (2, "r"),
    ]
    with pytest.raises(ConfigError, match="range"):
        grid_points([parse_param("a.x=1..4")])


@settings(max_examples=30, deadline=None)
@given(
    lo=st.integers(0, 50),
    span=st.integers(0, 50),
    n=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_points_are_reproducible_and_in_range(lo, span, n, seed):
    params = [parse_param(f"a.i={lo}..{lo + span}"), parse_param("a.f=0.1..0.2")]
    params.append(parse_param("a.c=x,y"))
    first = random_points(params, num_samples=n, sample_seed=seed)
    assert first == random_points(params, num_samples=n, sample_seed=seed)
    assert len(first) == n
    for p in first:
        assert isinstance(p["a.i"], int) and lo <= p["a.i"] <= lo + span
        assert 0.1 <= p["a.f"] <= 0.2 and p["a.c"] in ("x", "y")


def test_overrides_reach_nested_fields_and_are_validated(config):
    changed = apply_overrides(
        config,
        {
            "policy.cooldown_steps": 7,
            "simulation.num_steps": 12,
            "cluster.initial_allocation": "2:2",
        },
        policy_index=1,
    )
    assert changed.policies[1].cooldown_steps == 7
    assert changed.simulation.num_steps == 12
    assert changed.cluster.initial_allocation.label == "2:2"
    assert changed.policies[2] == config.policies[2]
    with pytest.raises(ConfigError, match="has no field 'nope'"):
        apply_overrides(config, {"simulation.nope": 1})
    with pytest.raises(ConfigError, match="cooldown_steps"):
        apply_overrides(config, {"policy.cooldown_steps": -1}, policy_index=1)
    with pytest.raises(ConfigError, match="not an index"):
        apply_overrides(config, {"policies.9.cooldown_steps": 1})


def test_policies_without_the_swept_knob_run_once_at_their_own_settings(config):
    plan = plan_sweep(config, params=["policy.cooldown_steps=2,8"], seeds=1)
    swept = [r for r in plan.runs if r.policy_kind == "hysteresis"]
    assert [r.point for r in swept] == [{"policy.cooldown_steps": 2}, {"policy.cooldown_steps": 8}]
    reference = [r for r in plan.runs if r.policy_kind != "hysteresis"]
    assert [(r.policy_kind, r.point) for r in reference] == [("static", {}), ("greedy", {})]
    assert len(plan.notes) == 2
    assert all("has no cooldown_steps" in n for n in plan.notes)
    plan = plan_sweep(config, seeds=1)
    assert plan.notes == []
    assert [r.policy_kind for r in plan.runs] == ["static", "hysteresis", "greedy"]
    with pytest.raises(ConfigError, match="no configured policy"):
        plan_sweep(config, params=["policy.no_such_knob=1"])


def test_table_has_one_row_per_run_matching_single_simulations(config, grid_table):
    # cooldowns x thresholds x seeds, and static and greedy once per seed
    assert len(grid_table) == 2 * 2 * 2 + 2 * 2
    assert list(grid_table.columns[:2]) == ["policy.cooldown_steps", "policy.up_threshold"]
    row = grid_table[
        (grid_table["policy.cooldown_steps"] == 8)
        & (grid_table["policy.up_threshold"] == 0.05)
        & (grid_table["seed"] == 1)
    ].iloc[0]
    resolved = apply_overrides(
        config, {"policy.cooldown_steps": 8, "policy.up_threshold": 0.05}, policy_index=1
    )
    direct = simulate(resolved, resolved.policies[1], seed=1).summary
    assert row["total_time_s"] == pytest.approx(direct.total_s, rel=1e-12)
    assert row["num_resizes"] == direct.num_resizes
    assert row["thrash_count"] == direct.thrash_count
    assert row["best_static_time_s"] == pytest.approx(direct.best_static_total_s, rel=1e-12)


def test_speedup_and_regret_follow_from_the_baselines(grid_table):
    t = grid_table
    assert (t["speedup"] == t["best_static_time_s"] / t["total_time_s"]).all()
    assert (t["regret_s"] == t["total_time_s"] - t["offline_optimal_time_s"]).all()
    # staying on the initial split is one feasible schedule: the optimum can only be shorter
    assert (t["initial_allocation"] == "3:1").all()
    assert (t["offline_optimal_time_s"] <= t["initial_static_time_s"] + 1e-9).all()
    # every run of one seed shares one baseline
    assert t.groupby("seed")["baseline_key"].nunique().eq(1).all()
    assert t["run_key"].is_unique


def test_baselines_are_built_once_per_workload_and_seed(config, monkeypatch):
    built = []
    original = sweep_tasks.build_context

    def counting(cfg, **kwargs):
        built.append((cfg.workload.name, kwargs["seed"]))
        return original(cfg, **kwargs)

    sweep_tasks._CONTEXTS.clear()
    monkeypatch.setattr(sweep_tasks, "build_context", counting)
    table = run_sweep(
        config,
        params=["policy.cooldown_steps=2,4,8"],
        seeds=2,
        workloads=["low_variance", "high_variance"],
        jobs=1,
        progress=False,
    )
    assert len(table) == 3 * 2 * 2 + 2 * 2 * 2  # static and greedy once per workload and seed
    assert sorted(built) == sorted(
        (w, s) for w in ("low_variance", "high_variance") for s in (0, 1)
    )


def test_same_sweep_same_table_in_one_or_two_processes(config, grid_table):
    again = run_sweep(config, params=GRID, seeds=2, jobs=2, progress=False)
    pd.testing.assert_frame_equal(grid_table, again)


def test_random_sweep_is_deterministic(config):
    kwargs = dict(params=["policy.cooldown_steps=0..20"], random=3, sample_seed=5, jobs=1)
    first = run_sweep(config, progress=False, **kwargs)
    second = run_sweep(config, progress=False, **kwargs)
    pd.testing.assert_frame_equal(first, second)
    swept = first[first["policy"] == "hysteresis"]
    assert len(swept) == 3 and swept["policy.cooldown_steps"].between(0, 20).all()
    assert first.loc[first["policy"] != "hysteresis", "policy.cooldown_steps"].isna().all()


def test_resumed_sweep_runs_only_what_is_new(config, tmp_path, monkeypatch, grid_table):
    calls = []
    original = sweep_module.evaluate_group

    def counting(group):
        if len(calls) == 1 and not hasattr(counting, "interrupted"):
            counting.interrupted = True
            raise KeyboardInterrupt  # stopped after the first group
        calls.append([run.key for run in group.runs])
        return original(group)

    monkeypatch.setattr(sweep_module, "evaluate_group", counting)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(config, params=GRID, seeds=2, out=tmp_path, jobs=1, progress=False)
    assert not (tmp_path / "results.parquet").exists()
    finished = len(calls[0])
    assert finished == 6  # one seed's group: 4 grid points, static and greedy
    calls.clear()
    table = run_sweep(config, params=GRID, seeds=2, out=tmp_path, jobs=1, progress=False)
    assert sum(map(len, calls)) == len(table) - finished  # the finished group is kept
    pd.testing.assert_frame_equal(table, grid_table)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "results.parquet"), grid_table)

    calls.clear()
    wider = ["policy.cooldown_steps=2,8,16", "policy.up_threshold=0.05,0.3"]
    bigger = run_sweep(config, params=wider, seeds=2, out=tmp_path, jobs=1, progress=False)
    assert len(bigger) == 16 and sum(map(len, calls)) == 4  # only cooldown 16 is new


def _ray_pool_address(request) -> str:
    """The suite's shared local Ray when conftest provides one, else a small one of our own
    (shut down after the test, so that no other test inherits it). Skips without Ray."""
    ray = pytest.importorskip("ray")

    for name in ("ray_session", "ray_cluster"):
        try:
            request.getfixturevalue(name)
            return "local"
        except pytest.FixtureLookupError:
            continue
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        request.addfinalizer(ray.shutdown)
    return "local"


@pytest.mark.live
def test_ray_pool_gives_the_same_table(config, grid_table, request):
    address = _ray_pool_address(request)
    on_ray = run_sweep(
        config,
        params=GRID,
        seeds=2,
        ray_address=address,
        jobs=2,
        worker_env=NO_NUMBA,
        progress=False,
    )
    pd.testing.assert_frame_equal(grid_table, on_ray)


def test_cli_writes_table_and_heatmap(tmp_path, config):
    import yaml

    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    out = tmp_path / "out"
    args = ["sweep", "--config", str(path), "--out", str(out), "--jobs", "1", "--no-progress"]
    for p in GRID:
        args += ["--param", p]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 4 + 2 and (out / "heatmap.png").stat().st_size > 0
    assert "speedup" in result.output


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--param", "policy.cooldown_steps=-1"], "cooldown_steps"),
        (["--param", "policy.nope=1"], "nope"),
        (["--param", "simulation.num_steps"], "PATH=V1"),
        (["--trace", "/no/such/trace.jsonl"], "no/such/trace"),
        (["--workload", "nope"], "unknown workload preset 'nope'"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, extra, message):
    import yaml

    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    out = tmp_path / "out"
    args = ["sweep", "--config", str(path), "--out", str(out), "--jobs", "1", *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output
    assert result.output.strip().count("\n") == 0  # one line
    assert result.output.startswith("error: ")
    assert not out.exists()


def test_calibrated_costs_change_the_runs_as_in_a_single_simulation(config, tmp_path):
    import yaml

    from dynaresize.twin.costs import load_costs

    costs_path = tmp_path / "costs.yaml"
    costs_path.write_text(yaml.safe_dump({"train": {"s_per_token_one_gpu": 0.0004}}))
    plain = run_sweep(config, params=["policy.cooldown_steps=4"], jobs=1, progress=False)
    costly = run_sweep(
        config, params=["policy.cooldown_steps=4"], costs=costs_path, jobs=1, progress=False
    )
    plain, costly = (t[t["policy"] == "hysteresis"] for t in (plain, costly))
    assert costly["run_key"].iloc[0] != plain["run_key"].iloc[0]
    calibrated = load_costs(costs_path, base=config.costs)
    resolved = apply_overrides(
        config.model_copy(update={"costs": calibrated}),
        {"policy.cooldown_steps": 4},
        policy_index=1,
    )
    direct = simulate(resolved, resolved.policies[1], costs=calibrated, seed=0).summary
    assert costly["total_time_s"].iloc[0] == pytest.approx(direct.total_s, rel=1e-12)
    assert costly["total_time_s"].iloc[0] != pytest.approx(plain["total_time_s"].iloc[0])


def test_a_trace_supplies_the_workload_and_its_content_the_key(tmp_path):
    from importlib.resources import files

    shipped = Path(str(files("dynaresize") / "data" / "verl_one_step_off_example.jsonl"))
    copy = tmp_path / "run.jsonl"
    copy.write_bytes(shipped.read_bytes())
    scenario = ScenarioConfig.model_validate(
        {
            **SMALL,
            "cluster": {
                **SMALL["cluster"],
                "gpus_per_node": 8,
                "candidate_allocations": ["5:3", "4:4", "3:5"],
                "initial_allocation": "4:4",
            },
        }
    )
    kwargs = dict(params=["policy.cooldown_steps=0,6"], jobs=1, progress=False)
    table = run_sweep(scenario, traces=[copy], **kwargs)
    assert (table["workload"] == "run.jsonl").all()
    assert (table["num_steps"] == 60).all()  # the trace's steps, not simulation.num_steps
    lines = copy.read_text().splitlines()
    copy.write_text("\n".join(lines[:-1]) + "\n")  # the same file name, one step fewer
    shorter = run_sweep(scenario, traces=[copy], **kwargs)
    assert (shorter["num_steps"] == 59).all()
    assert set(shorter["run_key"]).isdisjoint(table["run_key"])
