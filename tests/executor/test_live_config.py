"""An invalid live config fails before Ray starts, naming the field; the CLI says it in one line."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from dynaresize.cli import app
from dynaresize.config import load_run_config
from dynaresize.executor import driver
from dynaresize.executor.config import LiveConfig


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"num_workers": 3, "initial_allocation": "2:2"}, "initial_allocation"),
        ({"candidate_allocations": ["3:1", "2:3"]}, "candidate_allocations"),
        ({"model": {"preset": "huge"}}, "preset"),
        ({"samples_per_prompt": 1}, "samples_per_prompt"),
        ({"pipeline": "async"}, "pipeline"),
        ({"policy": {"kind": "nope"}}, "policy"),
        ({"num_workers": 1}, "num_workers"),
        ({"lr": 0.1}, "lr"),
        ({"policy": {"kind": "scheduled", "schedule": "1@4:1"}}, "policy.schedule"),
    ],
)
def test_an_invalid_live_config_names_the_field(fields, named) -> None:
    with pytest.raises(ValidationError, match=named):
        LiveConfig.model_validate(fields)


def test_run_live_validates_before_any_cluster_starts(monkeypatch, tmp_path) -> None:
    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started for an invalid config")

    monkeypatch.setattr(driver, "start", no_cluster)
    with pytest.raises(ValidationError, match="initial_allocation"):
        driver.run_live({"live": {"num_workers": 3}}, out_dir=tmp_path / "out")
    with pytest.raises(FileNotFoundError):
        driver.run_live(LiveConfig(), out_dir=tmp_path / "out", costs=tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match="checkpoint"):
        driver.run_live(LiveConfig(), out_dir=tmp_path / "empty", resume=True)


def test_the_shipped_live_config_loads() -> None:
    config = load_run_config("live_cpu")
    assert config.live is not None and config.live.num_workers == 4
    assert {a.label for a in config.live.candidates} == {"3:1", "2:2", "1:3"}


def test_the_cli_reports_a_bad_live_field_in_one_line_with_exit_code_2(tmp_path) -> None:
    from dynaresize.config import BUILTIN_CONFIG_DIR

    data = yaml.safe_load((BUILTIN_CONFIG_DIR / "live_cpu.yaml").read_text())
    data["live"]["num_workers"] = 5
    path = tmp_path / "bad_live.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["run", "--mode", "live", "--config", str(path), "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    message = result.output.strip()
    assert len(message.splitlines()) == 1
    assert "live" in message and "num_workers" in message
    assert "Traceback" not in message
    assert not out.exists()
