"""An invalid live config fails before Ray starts, naming the field; the CLI says it in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from dynaresize.cli import app
from dynaresize.config import BUILTIN_CONFIG_DIR, load_run_config
from dynaresize.executor import driver
from dynaresize.executor.config import LiveConfig, OverlappedMechanisms
from dynaresize.executor.rl.model_spec import ModelDtype, ModelPreset, ModelSpec


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


def test_the_model_is_a_typed_spec_and_old_yaml_reads_unchanged() -> None:
    config = LiveConfig.model_validate({"model": {"preset": "tiny", "dtype": "bfloat16"}})
    assert config.model == ModelSpec(preset=ModelPreset.TINY, dtype=ModelDtype.BFLOAT16)
    assert LiveConfig().model == ModelSpec(preset=ModelPreset.TINY)
    with pytest.raises(ValidationError, match=r"model\.dtype"):
        LiveConfig.model_validate({"model": {"dtype": "float7"}})
    with pytest.raises(ValidationError, match="only one of preset, config, path"):
        LiveConfig.model_validate({"model": {"preset": "tiny", "path": "/nowhere"}})


def test_the_old_staging_switches_read_as_the_overlapped_section() -> None:
    old = LiveConfig.model_validate(
        {"staging": {"chunk_mib": 4, "reuse_communicators": False, "defer_optimizer_reload": False}}
    )
    assert old.staging.chunk_mib == 4
    assert old.overlapped == OverlappedMechanisms(reuse_communicators=False, defer_optimizer=False)
    new = LiveConfig.model_validate({"overlapped": {"defer_optimizer": False}})
    assert new.overlapped.defer_optimizer is False and new.overlapped.reuse_communicators
    with pytest.raises(ValidationError, match=r"staging\.defer_optimizer_reload is the old name"):
        LiveConfig.model_validate(
            {"staging": {"defer_optimizer_reload": True}, "overlapped": {"defer_optimizer": False}}
        )


def test_the_live_config_loads_without_torch_or_ray() -> None:
    """The command line imports LiveConfig for every command; CI runs the twin without the
    `live` extra, so the config and what it imports must not need torch, transformers or ray."""
    root = Path(__file__).resolve().parents[2]
    script = (
        "import sys\n"
        "for name in ('torch', 'transformers', 'ray'):\n"
        "    sys.modules[name] = None  # any import of them raises ImportError\n"
        "from dynaresize.config_io import load_yaml_mapping\n"
        "from dynaresize.executor import LiveConfig\n"
        f"data = load_yaml_mapping({str(BUILTIN_CONFIG_DIR / 'live_cpu.yaml')!r})\n"
        "live = LiveConfig.model_validate(data['live'])\n"
        "print(live.model.resolved_preset.value, live.num_workers)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["tiny", "4"]
