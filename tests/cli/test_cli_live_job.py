"""`dynaresize run --mode live` with a user's job: every bad input (model folder, prompt files,
reward file, a prompt longer than the model's context, an export folder in use) is one `error:`
line naming the file and what is wrong, exit code 2, before Ray starts and with nothing written.
Relative paths in the config are read from the config file's folder. In-process, about 5 s."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from dynaresize.cli import app
from dynaresize.config import BUILTIN_CONFIG_DIR, load_run_config

pytest.importorskip("torch")
pytest.importorskip("ray")

from dynaresize.executor import driver
from dynaresize.executor.job.char_model import write_char_model_folder
from tests.job_files import verl_row, write_jsonl

REWARD = "def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 1.0\n"


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    return write_char_model_folder(tmp_path_factory.mktemp("cli_job") / "model")


@pytest.fixture
def job(tmp_path, model_folder, monkeypatch) -> Path:
    """A config folder with a good job (model, prompts, reward named relative to it); Ray is
    never started."""

    def no_cluster(*args, **kwargs):
        raise AssertionError("Ray was started for a bad input")

    monkeypatch.setattr(driver, "start", no_cluster)
    shutil.copytree(model_folder, tmp_path / "model")
    write_jsonl(tmp_path / "train.jsonl", [verl_row(f"What is {i} + 1?") for i in range(8)])
    (tmp_path / "reward.py").write_text(REWARD)
    data = yaml.safe_load((BUILTIN_CONFIG_DIR / "live_cpu.yaml").read_text())
    data["live"].update(
        {
            "model": {"path": "model"},
            "data": {"train_files": ["train.jsonl"], "overlong_prompts": "error"},
            "reward": {"path": "reward.py"},
            "max_response_tokens": 8,
        }
    )
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(data))
    return tmp_path


def run(job: Path, *extra: str) -> tuple[int, str]:
    out = job / "out"
    result = CliRunner().invoke(
        app, ["run", "--mode", "live", "--config", str(job / "job.yaml"), "--out", str(out), *extra]
    )
    assert not out.exists(), "a refused run wrote its output folder"
    return result.exit_code, result.output.strip()


def _edit_config(job: Path, **live: object) -> None:
    path = job / "job.yaml"
    data = yaml.safe_load(path.read_text())
    data["live"].update(live)
    path.write_text(yaml.safe_dump(data))


def _no_model(job: Path) -> None:
    shutil.rmtree(job / "model")


def _model_is_a_file(job: Path) -> None:
    shutil.rmtree(job / "model")
    (job / "model").write_text("not a folder")


def _no_weights(job: Path) -> None:
    for weights in (job / "model").glob("*.safetensors"):
        weights.unlink()


def _no_tokenizer(job: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (job / "model" / name).unlink(missing_ok=True)


def _no_data_file(job: Path) -> None:
    (job / "train.jsonl").unlink()


def _empty_data_file(job: Path) -> None:
    (job / "train.jsonl").write_text("")


def _no_prompt_key(job: Path) -> None:
    rows = [{k: v for k, v in verl_row("hi").items() if k != "prompt"}] * 8
    write_jsonl(job / "train.jsonl", rows)


def _wrong_type(job: Path) -> None:
    rows = [verl_row("hi")] * 8
    rows[3] = {**rows[3], "prompt": [{"role": "user", "content": None}]}
    write_jsonl(job / "train.jsonl", rows)


def _no_reward_file(job: Path) -> None:
    (job / "reward.py").unlink()


def _no_reward_function(job: Path) -> None:
    (job / "reward.py").write_text("def score(x):\n    return 1.0\n")


def _prompt_longer_than_context(job: Path) -> None:
    rows = [verl_row(f"What is {i} + 1?") for i in range(8)]
    rows[5] = verl_row("x" * 300)  # the model's context is 256 tokens, one per character
    write_jsonl(job / "train.jsonl", rows)
    _edit_config(
        job,
        data={
            "train_files": ["train.jsonl"],
            "max_prompt_tokens": None,
            "overlong_prompts": "error",
        },
    )


CASES: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "no model folder": (_no_model, ("model.path", "model", "does not exist")),
    "model path is a file": (_model_is_a_file, ("model.path", "not a folder")),
    "no weights": (_no_weights, ("model.path", "no weights")),
    "no tokenizer": (_no_tokenizer, ("model.path", "no tokenizer")),
    "no data file": (_no_data_file, ("train.jsonl", "no such file")),
    "empty data file": (_empty_data_file, ("train.jsonl", "empty")),
    "no prompt key": (_no_prompt_key, ("train.jsonl", "line 1", "no field 'prompt'")),
    "wrong type": (_wrong_type, ("train.jsonl", "line 4", "content", "expected a string")),
    "no reward file": (_no_reward_file, ("reward.py",)),
    "no reward function": (_no_reward_function, ("reward.py", "compute_score", "score")),
    "prompt longer than the context": (
        _prompt_longer_than_context,
        ("train.jsonl", "line 6", "tokens", "248"),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_job_input_is_one_error_line_with_exit_code_2(job, case) -> None:
    spoil, expected = CASES[case]
    spoil(job)
    code, output = run(job)
    assert code == 2, output
    assert len(output.splitlines()) == 1 and output.startswith("error: "), output
    for part in expected:
        assert part in output, (part, output)
    assert "Traceback" not in output


def test_an_export_folder_in_use_is_refused_before_anything_starts(job) -> None:
    taken = job / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    code, output = run(job, "--export-hf", str(taken))
    assert code == 2 and output.startswith("error: --export-hf") and "not an empty" in output
    assert (taken / "notes.txt").read_text() == "mine"


def test_a_job_needs_its_three_parts_together(job) -> None:
    _edit_config(job, reward=None)
    code, output = run(job)
    assert code == 2 and "reward" in output and len(output.splitlines()) == 1


def test_the_shipped_arithmetic_config_validates_and_names_package_data() -> None:
    from dynaresize.executor.job.live_job import resolve_job_paths

    config = load_run_config("live_cpu_arithmetic")
    assert config.live is not None and config.live.data is not None
    live = resolve_job_paths(config.live, BUILTIN_CONFIG_DIR)
    assert live.data is not None
    (train,) = live.data.train_files
    assert Path(train).is_file() and Path(train).parent.name == "arithmetic"
    assert str(live.model.path).endswith("arithmetic-warm-v2")
    # the workers receive the config as JSON: it must read back as the same config
    assert type(live).model_validate_json(live.model_dump_json()) == live
