"""Reward functions: a user's file called as veRL calls it, the built-ins, and one-line errors."""

from __future__ import annotations

import pickle
import textwrap

import numpy as np
import pytest
from pydantic import ValidationError

from dynaresize.executor.job.builtin_rewards import final_number
from dynaresize.executor.job.config import RewardConfig
from dynaresize.executor.job.reward import (
    RewardConfigError,
    RewardFunctionError,
    RewardInput,
    load_reward,
)
from dynaresize.executor.rl.task import LETTERS, TOKENIZER, RepeatTask


def user_reward(tmp_path, body: str, *, file: str = "reward.py", **fields):
    path = tmp_path / file
    path.write_text(textwrap.dedent(body))
    return load_reward(RewardConfig(path=str(path), **fields))


def sample(solution: str, truth, **fields) -> RewardInput:
    return RewardInput(
        data_source="src", solution_str=solution, ground_truth=truth, sample="prompt 3", **fields
    )


def test_user_function_gets_the_four_verl_arguments_by_keyword(tmp_path):
    reward = user_reward(
        tmp_path,
        """
        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            return {"score": len(solution_str) / 10, "seen": [data_source, ground_truth,
                    extra_info]}
        """,
    )
    outcome = reward(sample("abcd", "g", extra_info={"k": 1}))
    assert outcome.score == pytest.approx(0.4)
    assert outcome.details == {"seen": ["src", "g", {"k": 1}]}
    assert reward.label == f"compute_score ({tmp_path / 'reward.py'})"


def test_other_name_kwargs_and_numpy_floats(tmp_path):
    reward = user_reward(
        tmp_path,
        """
        import numpy as np
        def my_score(data_source, solution_str, ground_truth, extra_info, bonus=0.0):
            return np.float32(0.5) + bonus
        """,
        name="my_score",
        kwargs={"bonus": 0.25},
    )
    assert reward(sample("x", 1)).score == pytest.approx(0.75)
    assert [o.score for o in reward.score_all([sample("a", 1), sample("b", 2)])] == [0.75, 0.75]


def test_a_relative_path_is_read_from_the_base_folder(tmp_path):
    (tmp_path / "r.py").write_text("def compute_score(**kw):\n    return 1\n")
    reward = load_reward(RewardConfig(path="r.py"), base_dir=tmp_path)
    assert reward(sample("", 0)).score == 1.0


@pytest.mark.parametrize(
    ("returned", "problem"),
    [
        ("float('nan')", "returned nan, not a finite number"),
        ("float('inf')", "returned inf, not a finite number"),
        ("None", "returned None (NoneType), not a number"),
        ("'1.0'", "returned '1.0' (str), not a number"),
        ("True", "returned True (bool), not a number"),
        ("{'acc': 1}", "returned a mapping without a 'score' key (keys: acc)"),
        ("{'score': float('nan')}", "returned nan, not a finite number"),
        ("1 / 0", "raised ZeroDivisionError: division by zero"),
    ],
)
def test_a_bad_result_names_the_function_the_sample_and_the_problem(tmp_path, returned, problem):
    reward = user_reward(
        tmp_path,
        f"def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
        f"    return {returned}\n",
    )
    with pytest.raises(RewardFunctionError) as err:
        reward(sample("text", 1))
    assert str(err.value) == f"reward {reward.label}: prompt 3: {problem}"
    assert (err.value.function, err.value.sample) == (reward.label, "prompt 3")
    again = pickle.loads(pickle.dumps(err.value))  # as it comes back from a Ray worker
    assert str(again) == str(err.value) and again.problem == err.value.problem


def test_loading_errors_come_before_any_call(tmp_path):
    with pytest.raises(RewardConfigError, match=r"reward\.path: .*missing\.py: no such file"):
        load_reward(RewardConfig(path=str(tmp_path / "missing.py")))
    with pytest.raises(
        RewardConfigError,
        match=r"defines no 'compute_score' \(functions there: "
        r"helper, score\)",
    ):
        user_reward(tmp_path, "def score(**kw): return 1\ndef helper(): pass\nX = 3\n")
    with pytest.raises(RewardConfigError, match=r"X in .* is not a function"):
        user_reward(tmp_path, "X = 3\n", file="x.py", name="X")
    with pytest.raises(RewardConfigError, match=r"failed to load \(line 1\): SyntaxError"):
        user_reward(tmp_path, "def compute_score(:\n", file="syntax.py")
    with pytest.raises(RewardConfigError, match="failed to load: ModuleNotFoundError"):
        user_reward(tmp_path, "import no_such_module_here\n", file="imports.py")
    with pytest.raises(RewardConfigError, match=r"cannot be called as compute_score\(data_source"):
        user_reward(tmp_path, "def compute_score(text, truth):\n    return 1\n", file="sig.py")
    with pytest.raises(RewardConfigError, match="unexpected keyword argument 'bonus'"):
        user_reward(
            tmp_path,
            "def compute_score(data_source, solution_str, ground_truth, extra_info):\n  return 1\n",
            file="kw.py",
            kwargs={"bonus": 1},
        )


def test_config_takes_exactly_one_source():
    with pytest.raises(ValidationError, match="exactly one of path"):
        RewardConfig()
    with pytest.raises(ValidationError, match="exactly one of path"):
        RewardConfig(path="r.py", builtin="repeat")
    with pytest.raises(ValidationError, match="a builtin has none"):
        RewardConfig(builtin="repeat", name="compute_score")
    with pytest.raises(ValidationError, match=r"not a \.py file"):
        RewardConfig(path="r.txt")
    with pytest.raises(ValidationError, match="not a Python function name"):
        RewardConfig(path="r.py", name="compute-score")


@pytest.mark.parametrize(
    ("response", "truth", "score"),
    [
        ("so 40 + 2 = 42\n#### 42", "42", 1.0),
        ("#### 1,234", 1234, 1.0),
        ("####42.0", "42", 1.0),
        ("#### -7", "-7", 1.0),
        ("#### 41 then #### 42", "42", 1.0),  # the last answer counts
        ("#### 42 then #### 41", "42", 0.1),
        ("#### 43", "42", 0.1),
        ("the answer is 42", "42", 0.0),
        ("", "42", 0.0),
    ],
)
def test_final_number(response, truth, score):
    reward = load_reward(RewardConfig(builtin="final_number", kwargs={"format_score": 0.1}))
    assert reward(sample(response, truth)).score == score
    assert final_number("src", response, truth, None, format_score=0.1) == score


def test_final_number_with_a_ground_truth_that_is_no_number_names_the_sample():
    reward = load_reward(RewardConfig(builtin="final_number"))
    with pytest.raises(
        RewardFunctionError,
        match="builtin final_number: prompt 3: raised "
        "ValueError: ground_truth 'abc' is not a number",
    ):
        reward(sample("#### 1", "abc"))
    with pytest.raises(RewardConfigError, match="unexpected keyword argument 'bonus'"):
        load_reward(RewardConfig(builtin="final_number", kwargs={"bonus": 1}))


def test_repeat_builtin_is_the_repeat_tasks_own_checker():
    reward = load_reward(RewardConfig(builtin="repeat"))
    task, rng = RepeatTask(), np.random.default_rng(0)
    alphabet = LETTERS + "0123456789*="
    for _ in range(300):
        letter, count = LETTERS[int(rng.integers(len(LETTERS)))], int(rng.integers(1, 12))
        length = int(rng.integers(0, 15))
        biased = [letter] * 4 + list(alphabet)
        text = "".join(biased[int(i)] for i in rng.integers(0, len(biased), length))
        finished = bool(rng.integers(2))
        ids = TOKENIZER.encode(text) + ([TOKENIZER.eos_token_id] if finished else [])
        expected = task.score(task.make_item(prompt_id=0, letter=letter, count=count), ids)
        got = reward(sample(text, letter * count, finished=finished))
        assert got.score == expected.reward
    assert reward(sample("ccc", "ccc")).score == 1.0
    assert reward(sample("ccc", "ccc", finished=False)).score < 1.0
    assert reward(sample("cXc", "ccc")).score == reward(sample("c=c", "ccc")).score


def test_repeat_builtin_refuses_a_ground_truth_that_is_no_letter_run():
    reward = load_reward(RewardConfig(builtin="repeat"))
    with pytest.raises(RewardFunctionError, match="'cd' is not a run of one letter"):
        reward(sample("c", "cd"))
    with pytest.raises(RewardConfigError, match="takes none"):
        load_reward(RewardConfig(builtin="repeat", kwargs={"x": 1}))
