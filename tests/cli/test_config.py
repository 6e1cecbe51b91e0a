"""Scenario configs: loading, every rejection path, and the memory check's arithmetic."""

from __future__ import annotations

import math

import pytest
import yaml
from twin_scenarios import raw

from dynaresize.config import builtin_config_names, load_run_config, resolve_config_path
from dynaresize.config_io import ConfigError
from dynaresize.policies.types import Allocation
from dynaresize.twin.config import load_config
from dynaresize.twin.costs.memory import ModelConfig, check_candidate, train_gb_per_gpu


def write(tmp_path, data, name="cfg.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_builtin_configs_load_and_resolve_by_name():
    assert {"example", "paper"} <= set(builtin_config_names())
    for name in ("example", "paper"):
        cfg = load_run_config(name)
        assert cfg.cluster.total_gpus == 8
        assert Allocation.parse("6:2") in cfg.cluster.candidate_allocations
        assert cfg.policies, "built-in configs name the policies they compare"
    assert resolve_config_path("example").name == "example.yaml"


def test_scenario_round_trips_through_yaml(tmp_path):
    cfg = load_config(write(tmp_path, raw()))
    again = load_config(write(tmp_path, cfg.model_dump(mode="json"), "again.yaml"))
    assert again == cfg


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ({"cluster": {"candidate_allocations": ["6:2", "6:3"]}}, ["6:3", "9 GPUs", "8"]),
        (
            {
                "cluster": {
                    "rollout_tensor_parallel_size": 2,
                    "candidate_allocations": ["5:3", "6:2"],
                }
            },
            ["5:3", "not divisible", "rollout_tensor_parallel_size"],
        ),
        ({"cluster": {"initial_allocation": "2:6"}}, ["initial_allocation", "2:6"]),
        ({"cluster": {"intra_node_bandwidth_gbps": -1}}, ["cluster.intra_node_bandwidth_gbps"]),
        ({"cluster": {"gpu_memory_gb": float("nan")}}, ["cluster.gpu_memory_gb"]),
        ({"cluster": {"candidate_allocations": ["six:two"]}}, ["six:two"]),
        ({"model": {"num_params_b": 0}}, ["model.num_params_b"]),
        ({"simulation": {"num_stepz": 3}}, ["simulation.num_stepz"]),
        ({"policies": [{"kind": "telepathy"}]}, ["policies", "telepathy"]),
        ({"workload": {"max_response_tokens": -5}}, ["workload.max_response_tokens"]),
        ({"simulation": {"baseline_allocation": "7:1"}}, ["baseline_allocation", "7:1"]),
    ],
)
def test_bad_fields_fail_with_file_and_field(tmp_path, override, words):
    path = write(tmp_path, raw(**override))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message
    for word in words:
        assert word in message
    assert "\n" not in message


def test_memory_infeasible_candidate_is_rejected_with_numbers(tmp_path):
    # 20B parameters at 16 bytes each over 2 trainers is 160 GB per GPU (plus activations).
    data = raw(model={"num_params_b": 20}, cluster={"candidate_allocations": ["6:2", "2:6"]})
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, data))
    message = str(err.value)
    assert "candidate 2:6 does not fit" in message
    assert "GB" in message
    expected = train_gb_per_gpu(ModelConfig(num_params_b=20), train_gpus=2)
    assert f"{expected:.1f}" in message


def test_memory_arithmetic_closed_form():
    model = ModelConfig(
        num_params_b=10,
        weight_bytes_per_param=2,
        gradient_bytes_per_param=2,
        master_bytes_per_param=4,
        optimizer_bytes_per_param=8,
        activation_memory_gb_per_gpu=7,
        rollout_min_kv_cache_gb_per_gpu=3,
    )
    # 10e9 params x 16 bytes = 160 GB sharded over 4 trainers, plus 7 GB of activations.
    assert math.isclose(train_gb_per_gpu(model, train_gpus=4), 160 / 4 + 7)
    check = check_candidate(
        model, label="4:4", train_gpus=4, tensor_parallel_size=2, usable_gpu_memory_gb=48
    )
    assert math.isclose(check.rollout_gb_per_gpu, 20 / 2 + 3)
    assert check.feasible
    shrunk = check_candidate(
        model, label="3:5", train_gpus=3, tensor_parallel_size=1, usable_gpu_memory_gb=48
    )
    assert not shrunk.train_fits and "3:5" in shrunk.explain()
    # a resident rollout engine of 2 GB on every trainer: 47 + 2 GB no longer fits in 48
    resident = model.model_copy(update={"resident_engine_gb_per_trainer": 2.0})
    assert math.isclose(train_gb_per_gpu(resident, train_gpus=4), 160 / 4 + 7 + 2)
    tight = check_candidate(
        resident, label="4:4", train_gpus=4, tensor_parallel_size=2, usable_gpu_memory_gb=48
    )
    assert not tight.train_fits and "resident rollout engine" in tight.explain()


def test_missing_file_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = write(tmp_path, "cluster: [unclosed\n  x: 1\n")
    with pytest.raises(ConfigError, match=r"line \d+"):
        load_config(bad)
    with pytest.raises(ConfigError, match="mapping"):
        load_config(write(tmp_path, "- 1\n- 2\n", "list.yaml"))


def test_unknown_builtin_name_lists_the_builtins():
    with pytest.raises(ConfigError, match="example"):
        resolve_config_path("no-such-config")


def test_workload_preset_with_overrides(tmp_path):
    cfg = load_config(
        write(
            tmp_path,
            raw(workload={"preset": "high_variance"})
            | {"workload": {"preset": "high_variance", "samples_per_step": 17}},
        )
    )
    assert cfg.workload.name == "high_variance"
    assert cfg.workload.samples_per_step == 17
    with pytest.raises(ConfigError, match="unknown workload preset"):
        load_config(write(tmp_path, raw() | {"workload": "no_such"}, "p.yaml"))


def test_older_name_candidate_topologies_still_reads(tmp_path):
    data = raw()
    data["cluster"]["candidate_topologies"] = data["cluster"].pop("candidate_allocations")
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data))
    config = load_config(path)
    assert [a.label for a in config.cluster.candidate_allocations] == [
        str(c) for c in data["cluster"]["candidate_topologies"]
    ]
    assert "candidate_allocations" in config.model_dump()["cluster"]


@pytest.mark.parametrize("old_value", ["same", "different"])
def test_a_field_given_under_its_name_and_its_old_name_says_which_to_keep(tmp_path, old_value):
    data = raw()
    listed = list(data["cluster"]["candidate_allocations"])
    data["cluster"]["candidate_topologies"] = listed if old_value == "same" else listed[:1]
    path = write(tmp_path, data, "both.yaml")
    for load in (load_config, load_run_config):
        with pytest.raises(ConfigError) as err:
            load(str(path))
        message = str(err.value)
        assert message.startswith(f"{path}: cluster: ")
        assert "candidate_allocations and candidate_topologies are both given" in message
        assert "keep only candidate_allocations" in message
        assert "Extra inputs" not in message


@pytest.mark.parametrize(
    ("section", "old", "new", "keep"),
    [
        ("cluster", {"candidate_topologies": ["3:1"]}, {}, "candidate_allocations"),
        (
            "live",
            {"rollout_engines": "resident"},
            {"rollout_engine": {"release": "keep"}},
            "rollout_engine.release",
        ),
        (
            "live",
            {"staging": {"reuse_communicators": True}},
            {"overlapped": {"reuse_communicators": True}},
            "overlapped.reuse_communicators",
        ),
    ],
)
def test_every_old_name_beside_its_new_one_in_a_run_config_says_which_to_keep(
    tmp_path, section, old, new, keep
):
    data = yaml.safe_load(resolve_config_path("live_cpu").read_text())
    data[section] = {**data[section], **old, **new}
    with pytest.raises(ConfigError) as err:
        load_run_config(str(write(tmp_path, data, "both.yaml")))
    message = str(err.value)
    assert f"only {keep}" in message and "Extra inputs" not in message


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("name: a\nname: b\n", "duplicate key 'name'"),
        ("a: &x [1]\nb: *x\n", "anchors"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper"),
    ],
)
def test_yaml_that_would_hide_or_explode_is_refused(tmp_path, text, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=words) as err:
        load_config(path)
    assert str(path) in str(err.value)


def test_non_utf8_config_is_one_error_naming_the_file(tmp_path):
    path = tmp_path / "utf16.yaml"
    path.write_text("name: x\n", encoding="utf-16")
    with pytest.raises(ConfigError, match="not UTF-8") as err:
        load_config(path)
    assert str(path) in str(err.value)


def _live_config(tmp_path, live_updates, **section_updates):
    data = yaml.safe_load(resolve_config_path("live_cpu").read_text())
    data["live"].update(live_updates)
    for section, updates in section_updates.items():
        data[section] = {**data.get(section, {}), **updates}
    path = tmp_path / "live.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_live_section_takes_the_facts_it_shares_with_the_twin(tmp_path):
    config = load_run_config(str(_live_config(tmp_path, {})))
    assert config.live is not None
    assert config.live.num_workers == config.cluster.total_gpus == 4
    assert config.live.initial_allocation == config.cluster.initial_allocation
    assert list(config.live.candidate_allocations) == config.cluster.candidate_allocations
    assert config.live.num_steps == config.simulation.num_steps
    assert config.live.pipeline is config.pipeline.mode
    assert config.live.resize_strategy is config.pipeline.resize_strategy


def test_a_fact_stated_only_in_the_live_section_reaches_the_twin(tmp_path):
    data = yaml.safe_load(resolve_config_path("live_cpu").read_text())
    data["live"]["pipeline"] = "sync"
    del data["pipeline"]["mode"]
    path = tmp_path / "live.yaml"
    path.write_text(yaml.safe_dump(data))
    config = load_run_config(str(path))
    assert config.pipeline.mode.value == config.live.pipeline.value == "sync"


@pytest.mark.parametrize(
    ("live_updates", "words"),
    [
        ({"num_steps": 3}, "live.num_steps (3) disagrees with simulation.num_steps (8)"),
        ({"initial_allocation": "3:1"}, "live.initial_allocation (3:1) disagrees with cluster"),
        ({"pipeline": "sync"}, "live.pipeline (sync) disagrees with pipeline.mode"),
        ({"resize_strategy": "host_sync"}, "live.resize_strategy (host_sync) disagrees"),
        (
            {"candidate_allocations": ["3:1", "2:2"], "policy": {"kind": "static"}},
            "live.candidate_allocations (3:1, 2:2) disagrees with cluster.candidate_allocations",
        ),
    ],
)
def test_facts_stated_twice_must_agree(tmp_path, live_updates, words):
    path = _live_config(tmp_path, live_updates)
    with pytest.raises(ConfigError) as err:
        load_run_config(str(path))
    assert words in str(err.value) and str(path) in str(err.value)


def test_a_missing_extra_is_one_line_naming_it(monkeypatch):
    from dynaresize import extras

    monkeypatch.setattr(extras, "LIVE_EXTRA_MODULES", ("dynaresize_no_such_module",))
    with pytest.raises(ConfigError, match=r"needs the `live` extra \(dynaresize_no_such_module"):
        extras.require_live_extra("--mode live")
