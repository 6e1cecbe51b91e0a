"""The registry: configs by kind, the CLI spec form, validation, determinism and reset()."""

from __future__ import annotations

from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_observations import make_obs, run_closed_loop, times_with_imbalance
from pydantic import BaseModel, Field, ValidationError

from dynaresize.policies import (
    POLICY_CONFIG_CLASSES,
    Policy,
    build_policy,
    parse_policy_config,
    parse_policy_spec,
    policy_kinds,
)
from dynaresize.policies.base import PolicyConfigBase
from dynaresize.policies.registry import _index_by_kind

ALL_KINDS = [
    "static",
    "scheduled",
    "greedy",
    "hysteresis",
    "payback",
    "verl_switch",
    "verl_drc",
    "hpa",
]
MINIMAL = {"scheduled": {"schedule": [{"step": 3, "allocation": "4:4"}]}}


def minimal_config(kind: str) -> dict:
    return {"kind": kind, **MINIMAL.get(kind, {})}


def test_every_documented_kind_is_registered_once():
    assert policy_kinds() == ALL_KINDS


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_every_kind_builds_a_policy_from_a_mapping(kind):
    policy = build_policy(minimal_config(kind))
    assert isinstance(policy, Policy)
    assert policy.config.kind == kind


def _all_models(cls: type[BaseModel], seen: set[type] | None = None) -> set[type[BaseModel]]:
    seen = set() if seen is None else seen
    seen.add(cls)
    for field in cls.model_fields.values():
        for arg in (*getattr(field.annotation, "__args__", ()), field.annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel) and arg not in seen:
                _all_models(arg, seen)
    return seen


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_every_config_field_has_a_description(kind):
    for model in _all_models(POLICY_CONFIG_CLASSES[kind]):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


def test_a_second_class_claiming_a_kind_is_an_error():
    class Impostor(PolicyConfigBase):
        kind: Literal["greedy"] = Field(default="greedy", description="Clashes.")

        def build(self):
            raise NotImplementedError

    classes = (*POLICY_CONFIG_CLASSES.values(), Impostor)
    with pytest.raises(ValueError, match="'greedy' is claimed by both GreedyConfig and Impostor"):
        _index_by_kind(classes)


def test_spec_parses_kind_and_typed_fields():
    cfg = parse_policy_spec("hysteresis:cooldown_steps=5,up_threshold=0.2")
    assert cfg.kind == "hysteresis"
    assert cfg.cooldown_steps == 5
    assert cfg.up_threshold == pytest.approx(0.2)
    assert cfg.down_threshold == pytest.approx(0.15)  # default kept
    assert parse_policy_spec("static").kind == "static"
    assert parse_policy_spec(" greedy: ").kind == "greedy"


def test_spec_takes_a_compact_schedule():
    cfg = parse_policy_spec("scheduled:schedule=30@6:2;10@4:4")
    assert [(e.step, e.allocation.label) for e in cfg.schedule] == [(10, "4:4"), (30, "6:2")]


def test_spec_and_mapping_give_equal_configs():
    assert parse_policy_spec("payback:horizon_steps=20,margin=1.5") == parse_policy_config(
        {"kind": "payback", "horizon_steps": 20, "margin": 1.5}
    )


def _error_locations(err: ValidationError) -> list[str]:
    return [".".join(str(x) for x in e["loc"]) for e in err.errors()]


@pytest.mark.parametrize(
    ("spec", "location"),
    [
        ("hysteresis:cooldown_steps=-1", "hysteresis.cooldown_steps"),
        ("hysteresis:up_threshold=nan", "hysteresis.up_threshold"),
        ("hysteresis:smoothing_alpha=0", "hysteresis.smoothing_alpha"),
        ("hysteresis:move_mode=sideways", "hysteresis.move_mode"),
        ("hysteresis:cooldwn_steps=3", "hysteresis.cooldwn_steps"),
        ("payback:margin=0.5", "payback.margin"),
        ("payback:horizon_steps=0", "payback.horizon_steps"),
        ("greedy:deadband=2", "greedy.deadband"),
        ("hpa:tolerance=-0.1", "hpa.tolerance"),
        ("hpa:scale_up_select_policy=Sometimes", "hpa.scale_up_select_policy"),
        ("verl_switch:switch_threshold_ratio=1.5", "verl_switch.switch_threshold_ratio"),
        ("verl_drc:default_switch_cost_s=-1", "verl_drc.default_switch_cost_s"),
        ("scheduled:schedule=10@44", "scheduled.schedule.0.allocation"),
        ("scheduled:schedule=4@4:4;4@6:2", "scheduled.schedule"),
    ],
)
def test_bad_values_raise_a_value_error_naming_the_field(spec, location):
    with pytest.raises(ValidationError) as info:
        parse_policy_spec(spec)
    assert isinstance(info.value, ValueError)
    assert location in _error_locations(info.value)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("nosuchpolicy", "unknown policy kind 'nosuchpolicy'"),
        (":cooldown_steps=3", "no policy kind"),
        ("hysteresis:cooldown_steps", "is not of the form key=value"),
        ("hysteresis:cooldown_steps=1,cooldown_steps=2", "given more than once"),
        ("scheduled:schedule=10-4:4", "STEP@TRAIN:ROLLOUT"),
    ],
)
def test_malformed_specs_say_what_is_wrong(spec, words):
    with pytest.raises(ValidationError, match=words):
        parse_policy_spec(spec)


def test_the_command_line_reports_a_bad_spec_in_one_line_naming_the_field():
    from dynaresize.config_io import format_validation_error

    for spec, expected in [
        ("hysteresis:cooldown_steps=-1", "hysteresis.cooldown_steps: Input should be greater"),
        ("nosuchpolicy", "policy spec 'nosuchpolicy': unknown policy kind 'nosuchpolicy'"),
    ]:
        with pytest.raises(ValidationError) as info:
            parse_policy_spec(spec)
        line = format_validation_error(info.value)
        assert "\n" not in line
        assert expected in line


def test_cross_field_rules_are_checked():
    with pytest.raises(ValidationError, match="below one mini-batch"):
        parse_policy_config({"kind": "verl_switch", "switch_threshold_ratio": 0.2})
    with pytest.raises(ValidationError, match="ratio_increase_min"):
        parse_policy_config({"kind": "verl_drc", "ratio_increase_min": 0.5})


def test_configs_are_immutable():
    cfg = parse_policy_spec("hysteresis")
    with pytest.raises(ValidationError):
        cfg.cooldown_steps = 3


def test_configs_round_trip_through_json():
    for kind in ALL_KINDS:
        cfg = parse_policy_config(minimal_config(kind))
        assert parse_policy_config(cfg.model_dump(mode="json")) == cfg


RESET_CONFIGS = [
    {"kind": "static"},
    {"kind": "scheduled", "schedule": "2@5:3;5@4:4;9@6:2"},
    {"kind": "greedy"},
    {"kind": "hysteresis", "consecutive_signals": 2, "cooldown_steps": 3, "dwell_steps": 1},
    {"kind": "payback", "horizon_steps": 20},
    {"kind": "verl_switch"},
    {"kind": "verl_drc"},
    {"kind": "hpa", "scale_down_stabilization_window_steps": 2},
]


def _replay(policy, imbalances, measured):
    """Feed the policy a fixed stream; resizes take effect at the next boundary."""
    allocation = "6:2"
    decisions = []
    for step, x in enumerate(imbalances):
        rollout_s, train_s = times_with_imbalance(x)
        obs = make_obs(
            step=step,
            allocation=allocation,
            rollout_s=rollout_s,
            train_s=train_s,
            predicted_step_s={"4:4": 20.0, "5:3": 30.0},
            resize_cost_s=50.0,
            measured_resize_costs_s=measured[: step // 3],
        )
        decision = policy.decide(obs)
        decisions.append(decision)
        if decision.is_resize:
            allocation = decision.target.label
    return decisions


@settings(max_examples=25, deadline=None)
@given(
    imbalances=st.lists(st.floats(-0.9, 0.9), min_size=12, max_size=30),
    measured=st.lists(st.floats(0.0, 30.0), max_size=10),
)
@pytest.mark.parametrize("config", RESET_CONFIGS, ids=[c["kind"] for c in RESET_CONFIGS])
def test_reset_restores_initial_behaviour_and_decisions_are_deterministic(
    config, imbalances, measured
):
    policy = build_policy(config)
    first = _replay(policy, imbalances, measured)
    policy.reset()
    assert _replay(policy, imbalances, measured) == first
    assert _replay(build_policy(config), imbalances, measured) == first


def test_policies_import_nothing_else_of_the_project():
    import ast
    import pathlib

    import dynaresize.policies as pkg

    for path in pathlib.Path(pkg.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert not node.module.startswith("dynaresize"), f"{path.name}: {node.module}"
                assert node.module.split(".")[0] not in {"twin", "traces", "executor"}
            if isinstance(node, ast.Import):
                for name in node.names:
                    assert name.name.split(".")[0] not in {"dynaresize", "twin", "traces"}


def test_closed_loop_static_never_moves():
    record = run_closed_loop(
        build_policy({"kind": "static"}),
        lambda step, a: times_with_imbalance(0.9),
        start="6:2",
        num_steps=20,
    )
    assert record.resize_steps == []
