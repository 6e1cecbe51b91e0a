"""The shipped arithmetic task: the committed files are what the generator writes, and they load."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from dynaresize.executor.job.config import DataConfig, RewardConfig
from dynaresize.executor.job.dataset_files import read_rows
from dynaresize.executor.job.reward import RewardInput, load_reward

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "dynaresize" / "data" / "arithmetic"


def generator():
    spec = importlib.util.spec_from_file_location(
        "make_arithmetic_data", ROOT / "tools" / "make_arithmetic_data.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed(split: str):
    return read_rows(DataConfig(train_files=[str(DATA / f"{split}.parquet")]))


def test_committed_files_are_small_and_match_the_generator():
    expected = generator().arithmetic_rows()
    assert sum(p.stat().st_size for p in DATA.glob("*.parquet")) < 200_000
    for split in ("train", "test"):
        rows = committed(split)
        assert len(rows) == len(expected[split])
        for row, want in zip(rows, expected[split], strict=True):
            assert list(row.prompt) == want["prompt"]
            assert row.ground_truth == want["reward_model"]["ground_truth"]
            assert row.extra_info == want["extra_info"]


def test_questions_are_distinct_and_train_and_test_do_not_overlap():
    def questions(split):
        return [row.prompt[0]["content"] for row in committed(split)]

    train, test = questions("train"), questions("test")
    assert len(set(train)) == len(train) == 400 and len(set(test)) == len(test) == 100
    assert not set(train) & set(test)
    assert 0.15 < sum("*" in q for q in train) / len(train) < 0.25


def test_ground_truths_are_right_and_the_reference_response_scores_one():
    reward = load_reward(RewardConfig(builtin="final_number"))
    for row in committed("test"):
        a, op, b = row.prompt[0]["content"].removeprefix("What is ").rstrip("?").split()
        assert int(row.ground_truth) == (int(a) + int(b) if op == "+" else int(a) * int(b))
        assert max(int(a), int(b)) < (20 if op == "+" else 10)  # small enough to warm-start on
        response = row.extra_info["response"]
        sample = RewardInput(row.data_source, response, row.ground_truth, row.extra_info)
        assert reward(sample).score == 1.0
