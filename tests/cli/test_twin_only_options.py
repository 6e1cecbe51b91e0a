"""Lending within a step and partial rollouts are twin options: a config asking for them runs in
the twin, is refused for --mode live with one line naming the field, and nonsense combinations
are refused when the config is read."""

from __future__ import annotations

import pytest
import yaml
from cli_helpers import assert_one_error, invoke
from twin_scenarios import raw

from dynaresize.config import load_run_config, refuse_twin_only_options
from dynaresize.config_io import ConfigError


def _config(tmp_path, **pipeline):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(raw(pipeline=pipeline, simulation={"num_steps": 4})))
    return path


@pytest.mark.parametrize(
    ("pipeline", "field"),
    [
        ({"mode": "one_step_off", "lending": True}, "pipeline.lending"),
        ({"mode": "async", "partial_rollout": True}, "pipeline.partial_rollout"),
    ],
)
def test_live_refuses_a_twin_only_option_naming_it(tmp_path, pipeline, field):
    path = _config(tmp_path, **pipeline)
    with pytest.raises(ConfigError, match=f"^{field}: the live executor does not carry it out"):
        refuse_twin_only_options(load_run_config(str(path)))
    out = tmp_path / "out"
    line = assert_one_error(
        invoke("run", "--mode", "live", "--config", path, "--out", out), field, "live executor"
    )
    assert line.startswith(f"error: {field}") and not out.exists()


def test_the_same_config_runs_in_the_twin(tmp_path):
    path = _config(tmp_path, mode="one_step_off", lending=True)
    result = invoke("run", "--mode", "sim", "--config", path, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    refuse_twin_only_options(load_run_config("example"))  # nothing twin-only there


@pytest.mark.parametrize(
    ("pipeline", "words"),
    [
        ({"mode": "one_step_off", "partial_rollout": True}, ["partial_rollout", "one_step_off"]),
        (
            {"mode": "async", "partial_rollout": True, "in_flight": "abort"},
            ["partial_rollout", "in_flight", "give one"],
        ),
    ],
)
def test_a_partial_rollout_that_would_change_nothing_or_contradict_is_refused(
    tmp_path, pipeline, words
):
    result = invoke("run", "--config", _config(tmp_path, **pipeline), "--out", tmp_path / "o")
    assert_one_error(result, *words)


def test_lending_where_no_split_holds_a_replica_is_refused(tmp_path):
    data = raw(pipeline={"lending": True})
    # replicas of 3 GPUs: the 6 rollout GPUs hold two, the 2 training GPUs none
    data["cluster"].update(
        rollout_tensor_parallel_size=3, candidate_allocations=["2:6"], initial_allocation="2:6"
    )
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    result = invoke("run", "--config", path, "--out", tmp_path / "o")
    assert_one_error(result, "pipeline.lending", "rollout_tensor_parallel_size 3")
