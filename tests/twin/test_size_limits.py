"""Sizes and magnitudes are checked where a config is read: a run too large to hold, or a
number that would overflow a stage time, is refused naming the field, the figure and the limit,
before anything is allocated."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import yaml
from pydantic import ValidationError
from twin_scenarios import raw
from typer.testing import CliRunner

from dynaresize.config_io import ConfigError
from dynaresize.policies.types import Allocation
from dynaresize.twin.config import (
    MAX_SIMULATED_SAMPLES,
    MAX_SIMULATED_STEPS,
    MAX_TOKENS_PER_SAMPLE,
    ScenarioConfig,
)
from dynaresize.twin.costs import CostModels
from dynaresize.twin.step_costs import StepCosts


def _refusal(**override) -> str:
    with pytest.raises(ValidationError) as caught:
        ScenarioConfig.model_validate(raw(**override))
    return str(caught.value)


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ({"simulation": {"num_steps": 10**12}}, ["simulation.num_steps", "1e+12", "1,000,000"]),
        (
            {"simulation": {"num_steps": MAX_SIMULATED_STEPS + 1}},
            ["simulation.num_steps", f"{MAX_SIMULATED_STEPS:,}"],
        ),
        (
            {"workload": {"preset": "high_variance", "samples_per_step": 10**308}},
            ["workload.samples_per_step", "about 1e308", f"{MAX_SIMULATED_SAMPLES:,}"],
        ),
        (
            {"workload": {"preset": "high_variance", "max_response_tokens": 10**400}},
            ["workload.max_response_tokens", "about 1e400", f"{MAX_TOKENS_PER_SAMPLE:,}"],
        ),
        (
            {"workload": {"preset": "high_variance", "prompt_median_tokens": 1e308}},
            ["workload.prompt_median_tokens", "1e+308"],
        ),
        ({"model": {"num_params_b": 1e308}}, ["model.num_params_b", "1e+308", "1e+12"]),
        (
            {"cluster": {"intra_node_bandwidth_gbps": 5e-324}},
            ["cluster.intra_node_bandwidth_gbps", "4.94e-324", "too small to divide by"],
        ),
        (
            {"costs": {"train": {"s_per_token_one_gpu": 1e308}}},
            ["train.s_per_token_one_gpu", "1e+308"],
        ),
        (
            {"costs": {"sync": {"link_efficiency": 1e-300}}},
            ["sync.link_efficiency", "too small to divide by"],
        ),
    ],
)
def test_a_size_or_magnitude_out_of_range_is_refused_naming_field_figure_and_limit(override, words):
    message = _refusal(**override)
    for word in words:
        assert word in message, (word, message)


def test_the_limits_leave_realistic_runs_alone():
    config = ScenarioConfig.model_validate(
        raw(simulation={"num_steps": MAX_SIMULATED_SAMPLES // 256}, workload="high_variance")
    )
    assert config.simulation.num_steps * config.workload.samples_per_step <= MAX_SIMULATED_SAMPLES
    # A fitted cost can be tiny or zero; only divisors have a floor.
    costs = CostModels().with_overrides({"train": {"s_per_token_one_gpu": 1e-15}})
    assert costs.train.s_per_token_one_gpu == 1e-15


def test_a_cost_file_out_of_range_names_its_field_and_warns_nothing(tmp_path):
    from dynaresize.cli import app

    costs = tmp_path / "costs.yaml"
    costs.write_text(yaml.safe_dump({"sync": {"link_efficiency": 5e-324}}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = ["run", "--config", "example", "--steps", "5", "--costs", str(costs)]
        result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(costs) in lines[0] and "sync.link_efficiency" in lines[0]
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["run", "--steps", str(10**9)], ["--steps 1,000,000,000", "at most 1,000,000"]),
        (
            ["sweep", "--config", "example", "--param", "simulation.num_steps=1000000000000"],
            ["simulation.num_steps", "1e+12"],
        ),
    ],
)
def test_the_command_line_refuses_before_allocating(tmp_path, args, words):
    import resource

    from dynaresize.cli import app

    before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    for word in words:
        assert word in result.output
    # Nothing close to a run's arrays was allocated (a 10**9-step run needs tens of GB).
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kb
    assert grown_kb < 500_000
    assert not (tmp_path / "o").exists()


def test_a_stage_time_that_still_overflows_names_its_stage_and_inputs():
    from dynaresize.twin.simulation import _require_finite

    candidates = (Allocation.parse("6:2"), Allocation.parse("4:4"))
    finite = np.ones((3, 2))
    costs = StepCosts(
        candidates=candidates,
        rollout_s=finite,
        train_s=finite,
        sync_s=np.array([1.0, np.inf]),
        step_s=finite,
    )
    with pytest.raises(ConfigError, match=r"sync time is not finite .* costs\.sync"):
        _require_finite(costs)
