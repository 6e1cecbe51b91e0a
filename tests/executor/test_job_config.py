"""The `data` and `reward` config sections: pure pydantic, checked fields, veRL's spellings."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from dynaresize.executor.job.config import DataConfig, OverlongPrompts, RewardConfig


def test_configs_and_file_checks_import_without_torch():
    code = (
        "import sys\n"
        "import dynaresize.executor.job.config, dynaresize.executor.job.dataset_files\n"
        "import dynaresize.executor.job.prompt_sampler, dynaresize.executor.job.reward\n"
        "import dynaresize.executor.job.hf_folder, dynaresize.executor.job.dataset\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'ray') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == ""


def test_defaults_and_one_file_as_a_string():
    config = DataConfig(train_files="data/train.parquet")
    assert config.train_files == ("data/train.parquet",)
    assert (config.prompt_key, config.max_prompt_tokens) == ("prompt", 512)
    assert config.overlong_prompts is OverlongPrompts.DROP and config.shuffle


def test_verl_spelling_of_the_prompt_limit_is_read():
    assert DataConfig(train_files=["a.jsonl"], max_prompt_length=64).max_prompt_tokens == 64
    with pytest.raises(ValidationError, match="not both"):
        DataConfig(train_files=["a.jsonl"], max_prompt_length=64, max_prompt_tokens=64)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"train_files": []}, "at least one file"),
        ({"train_files": ["a.csv"]}, r"a\.csv: not a \.parquet or \.jsonl file"),
        ({"train_files": ["a.jsonl"], "max_prompt_tokens": 0}, "greater than or equal to 1"),
        ({"train_files": ["a.jsonl"], "overlong_prompts": "left"}, "'drop', 'truncate' or 'error'"),
        ({"train_files": ["a.jsonl"], "prompt_keys": "q"}, "Extra inputs are not permitted"),
        ({}, "train_files"),
    ],
)
def test_bad_data_fields_are_named(fields, expected):
    with pytest.raises(ValidationError, match=expected):
        DataConfig(**fields)


def test_every_field_is_described():
    for model in (DataConfig, RewardConfig):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"
