"""`--resume` continues the same run or refuses, before Ray starts and with nothing overwritten:
a config that changes the run, a corrupt or inconsistent checkpoint, and a missing model folder
are each one error line with exit 2. No Ray here: `start` is replaced by a guard that fails the
test if a cluster would be started."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from dynaresize.cli import app
from dynaresize.config import BUILTIN_CONFIG_DIR, load_run_config
from dynaresize.executor import driver
from dynaresize.executor.config import LiveConfig
from dynaresize.executor.run_folder import checkpoint as ckpt
from dynaresize.executor.run_folder.checkpoint_manifest import (
    MANIFEST_FILE,
    CheckpointError,
    write_manifest,
)
from dynaresize.executor.run_folder.resume_check import (
    CONFIG_FILE,
    RESUMES_FILE,
    ResumeMismatchError,
    check_resume,
    record_resume,
)
from dynaresize.policies.types import Allocation

LIVE = {
    "num_workers": 4,
    "initial_allocation": "2:2",
    "candidate_allocations": ["3:1", "2:2", "1:3"],
    "num_steps": 4,
    "pipeline": "sync",
}


def _config_file(tmp_path: Path, live: dict) -> Path:
    """The shipped CPU config with its `live:` section replaced by `live`."""
    data = yaml.safe_load((BUILTIN_CONFIG_DIR / "live_cpu.yaml").read_text())
    data["live"] = live
    path = tmp_path / "live.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run_folder(tmp_path: Path, live: LiveConfig | None = None, **meta_overrides) -> Path:
    """A run folder as a live run leaves it after 2 of 4 steps: config.json and a checkpoint."""
    out = tmp_path / "run"
    out.mkdir(parents=True)
    live = live or LiveConfig.model_validate(LIVE)
    (out / CONFIG_FILE).write_text(live.model_dump_json(indent=2))
    gen = torch.Generator().manual_seed(0)
    ckpt.save(
        out,
        ckpt.Checkpoint(
            next_step=2,
            weights_version=2,
            allocation=Allocation.parse("3:1"),
            vectors={k: torch.randn(50, generator=gen) for k in ckpt.VECTOR_KEYS},
            pending_batch=None,
            num_resizes=1,
        ),
    )
    if meta_overrides:
        meta_path = out / ckpt.CHECKPOINT_DIR / ckpt.META_FILE
        meta = json.loads(meta_path.read_text()) | meta_overrides
        meta_path.write_text(json.dumps(meta))
        write_manifest(out / ckpt.CHECKPOINT_DIR, [ckpt.STATE_FILE, ckpt.META_FILE])
    return out


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def no_cluster(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a cluster was started although the run should have been refused")

    monkeypatch.setattr(driver, "start", refuse)


# --- item: a resume that would change the run ------------------------------------------------


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"seed": 1}, "seed"),
        ({"model": {"preset": "qwen2-0.5b"}}, "model.preset"),
        ({"prompts_per_step": 4}, "prompts_per_step"),
        ({"candidate_allocations": ["3:1", "2:2"]}, "candidate_allocations"),
        ({"policy": {"kind": "hysteresis"}}, "policy.kind"),
        ({"pipeline": "one_step_off"}, "pipeline"),
        ({"resize_strategy": "stop_and_rebuild"}, "resize_strategy"),
        ({"task": {"max_count": 7}}, "task.max_count"),
        ({"optimizer": {"lr": 0.5}}, "optimizer.lr"),
    ],
)
def test_a_resume_that_changes_the_run_is_refused_naming_the_field(
    tmp_path, no_cluster, change, named
) -> None:
    out = _run_folder(tmp_path)
    before = _snapshot(out)
    live = LiveConfig.model_validate(LIVE | change)
    with pytest.raises(ResumeMismatchError, match=rf"\b{named}\b") as refused:
        driver.run_live(live, out_dir=out, resume=True)
    assert len(str(refused.value).splitlines()) == 1
    assert _snapshot(out) == before  # config.json and the checkpoint untouched, nothing added


def test_output_options_may_change_on_resume_and_the_change_is_recorded(tmp_path) -> None:
    out = _run_folder(tmp_path)
    live = LiveConfig.model_validate(
        LIVE | {"num_steps": 8, "checkpoint_every_steps": 3, "record_batches": True}
    )
    note = check_resume(live, out, ckpt.load(out))
    assert note.changed == {
        "checkpoint_every_steps": (2, 3),
        "num_steps": (4, 8),
        "record_batches": (False, True),
    }
    record_resume(out, note)
    record_resume(out, note)
    entries = json.loads((out / RESUMES_FILE).read_text())
    assert len(entries) == 2 and entries[0]["changed"]["num_steps"] == {"before": 4, "after": 8}
    # the same config resumes with nothing changed
    assert check_resume(LiveConfig.model_validate(LIVE), out, ckpt.load(out)).changed == {}
    with pytest.raises(ResumeMismatchError, match="below the checkpoint's next step 2"):
        check_resume(LiveConfig.model_validate(LIVE | {"num_steps": 1}), out, ckpt.load(out))


def test_the_cli_refuses_a_resume_with_another_seed_in_one_line(tmp_path) -> None:
    config = _config_file(tmp_path, {"model": {"preset": "tiny"}})
    out = _run_folder(tmp_path, load_run_config(str(config)).live)
    before = _snapshot(out)
    args = ["run", "--mode", "live", "--config", str(config), "--out", str(out), "--resume"]
    result = CliRunner().invoke(app, [*args, "--seed", "1"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "seed: 0 -> 1" in lines[0]
    assert _snapshot(out) == before


# --- item: corrupt or inconsistent checkpoints -----------------------------------------------


def _corrupt(out: Path, how: str) -> None:
    folder = out / ckpt.CHECKPOINT_DIR
    state, meta = folder / ckpt.STATE_FILE, folder / ckpt.META_FILE
    if how == "garbage meta":
        meta.write_text("{not json")
    elif how == "truncated state":
        data = state.read_bytes()
        state.write_bytes(data[: len(data) // 2])
    elif how == "random state":
        state.write_bytes(os.urandom(state.stat().st_size))
    elif how == "edited meta":
        meta.write_text(meta.read_text().replace('"next_step": 2', '"next_step": 3'))


@pytest.mark.parametrize(
    ("how", "named", "says"),
    [
        ("garbage meta", "meta.json", "bytes, the manifest recorded"),
        ("truncated state", "state.pt", "bytes, the manifest recorded"),
        ("random state", "state.pt", "differs from the hash"),
        ("edited meta", "meta.json", "differs from the hash"),
    ],
)
def test_a_checkpoint_changed_after_it_was_written_fails_its_manifest(
    tmp_path, no_cluster, how, named, says
) -> None:
    out = _run_folder(tmp_path)
    _corrupt(out, how)
    before = _snapshot(out)
    with pytest.raises(CheckpointError, match=says) as refused:
        driver.run_live(LiveConfig.model_validate(LIVE), out_dir=out, resume=True)
    message = str(refused.value)
    assert len(message.splitlines()) == 1 and named in message
    assert _snapshot(out) == before


@pytest.mark.parametrize(
    ("how", "named", "says"),
    [
        ("garbage meta", "meta.json", "not readable JSON"),
        ("truncated state", "state.pt", "not a readable tensor file"),
        ("random state", "state.pt", "not a readable tensor file"),
    ],
)
def test_an_old_checkpoint_without_manifest_is_checked_by_content(
    tmp_path, no_cluster, how, named, says
) -> None:
    out = _run_folder(tmp_path)
    (out / ckpt.CHECKPOINT_DIR / MANIFEST_FILE).unlink()
    _corrupt(out, how)
    with pytest.raises(CheckpointError, match=says) as refused:
        driver.run_live(LiveConfig.model_validate(LIVE), out_dir=out, resume=True)
    assert len(str(refused.value).splitlines()) == 1 and named in str(refused.value)


def test_an_old_checkpoint_without_manifest_is_accepted_with_a_note(tmp_path) -> None:
    out = _run_folder(tmp_path)
    (out / ckpt.CHECKPOINT_DIR / MANIFEST_FILE).unlink()
    note = check_resume(LiveConfig.model_validate(LIVE), out, ckpt.load(out))
    assert any("no manifest" in n for n in note.notes)


@pytest.mark.parametrize(
    ("meta", "says"),
    [
        ({"allocation": "9:9"}, "allocation 9:9 is not a split of this run"),
        ({"allocation": "nine"}, "allocation 'nine' is not TRAIN:ROLLOUT"),
        ({"next_step": "two"}, "`next_step` is 'two', not a count"),
        ({"weights_version": 5}, "weights_version 5 does not match next_step 2"),
    ],
)
def test_a_consistent_but_wrong_checkpoint_is_refused_naming_the_file(
    tmp_path, no_cluster, meta, says
) -> None:
    out = _run_folder(tmp_path, **meta)
    with pytest.raises(CheckpointError, match=says) as refused:
        driver.run_live(LiveConfig.model_validate(LIVE), out_dir=out, resume=True)
    assert "meta.json" in str(refused.value)


def test_a_checkpoint_missing_a_key_or_a_vector_is_refused(tmp_path) -> None:
    out = _run_folder(tmp_path)
    folder = out / ckpt.CHECKPOINT_DIR
    meta = json.loads((folder / ckpt.META_FILE).read_text())
    del meta["num_resizes"]
    (folder / ckpt.META_FILE).write_text(json.dumps(meta))
    write_manifest(folder, [ckpt.STATE_FILE, ckpt.META_FILE])
    with pytest.raises(CheckpointError, match=r"meta\.json: no `num_resizes`"):
        ckpt.load(out)
    out2 = _run_folder(tmp_path / "second")
    folder2 = out2 / ckpt.CHECKPOINT_DIR
    torch.save({"master": torch.zeros(3)}, folder2 / ckpt.STATE_FILE)
    write_manifest(folder2, [ckpt.STATE_FILE, ckpt.META_FILE])
    with pytest.raises(CheckpointError, match=r"state\.pt: no exp_avg, exp_avg_sq"):
        ckpt.load(out2)


def test_a_missing_run_config_is_refused(tmp_path) -> None:
    out = _run_folder(tmp_path)
    (out / CONFIG_FILE).unlink()
    with pytest.raises(CheckpointError, match=r"config\.json: missing"):
        check_resume(LiveConfig.model_validate(LIVE), out, ckpt.load(out))


# --- a live start that cannot succeed writes nothing -----------------------------------------


def test_a_missing_model_folder_is_one_line_before_ray_and_nothing_is_written(tmp_path) -> None:
    live = {"model": {"path": str(tmp_path / "no_model")}}
    config = _config_file(tmp_path, live)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["run", "--mode", "live", "--config", str(config), "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "live.model.path" in lines[0] and "does not exist" in lines[0]
    assert not out.exists()
    (tmp_path / "not_a_model").mkdir()
    live = LIVE | {"model": {"path": str(tmp_path / "not_a_model")}}
    with pytest.raises(ValueError, match=r"no config\.json"):
        driver.run_live(LiveConfig.model_validate(live), out_dir=out)
    assert not out.exists()
