"""Prompts in veRL's dataset format: reading, checking, rendering, limits, one-line errors."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from dynaresize.executor.job.char_model import SPECIAL_TOKENS, write_char_model_folder
from dynaresize.executor.job.config import DataConfig
from dynaresize.executor.job.dataset import load_prompt_dataset
from dynaresize.executor.job.dataset_files import DatasetError, read_rows
from dynaresize.executor.job.hf_folder import load_tokenizer
from tests.job_files import verl_row, write_jsonl, write_parquet

USER, END, ASSISTANT = 3, 1, 4  # ids of <|user|>, <|end|>, <|assistant|> in the char tokenizer


def char_ids(text: str) -> list[int]:
    """Closed form of the char tokenizer: special tokens first, then one id per byte."""
    return [len(SPECIAL_TOKENS) + byte for byte in text.encode()]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = write_char_model_folder(tmp_path_factory.mktemp("model") / "tiny")
    return load_tokenizer(folder)


def data(files, **fields) -> DataConfig:
    return DataConfig(train_files=[str(f) for f in files], **fields)


def test_chat_prompts_render_with_the_folders_chat_template(tmp_path, tokenizer):
    rows = [verl_row("What is 2 + 3?", answer="5"), verl_row("Hi", answer="7")]
    dataset = load_prompt_dataset(data([write_parquet(tmp_path / "t.parquet", rows)]), tokenizer)
    first = dataset[0]
    assert first.text == "<|user|>What is 2 + 3?<|end|><|assistant|>"
    assert list(first.token_ids) == [USER, *char_ids("What is 2 + 3?"), END, ASSISTANT]
    assert first.text == tokenizer.apply_chat_template(
        rows[0]["prompt"], add_generation_prompt=True, tokenize=False
    )
    assert (first.row.data_source, first.row.ground_truth) == ("test", "5")
    assert dataset[1].row.ground_truth == "7" and dataset[1].row.extra_info == {"index": 0}


def test_multi_turn_and_system_messages_render_in_order(tmp_path, tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1+1"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "2+2"},
    ]
    path = write_jsonl(tmp_path / "t.jsonl", [verl_row(messages)])
    text = load_prompt_dataset(data([path]), tokenizer)[0].text
    expected = "<|system|>Be brief.<|end|><|user|>1+1<|end|><|assistant|>2<|end|><|user|>2+2<|end|>"
    assert text == expected + "<|assistant|>"


def test_plain_string_prompts_are_taken_as_is(tmp_path, tokenizer):
    row = verl_row("x") | {"prompt": "12*c="}
    dataset = load_prompt_dataset(data([write_jsonl(tmp_path / "t.jsonl", [row])]), tokenizer)
    assert dataset[0].text == "12*c=" and list(dataset[0].token_ids) == char_ids("12*c=")


def test_pandas_written_parquet_gives_plain_python_values(tmp_path, tokenizer):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame([verl_row("a", answer=3, tags=[1, 2]), verl_row("b", answer=4)])
    path = tmp_path / "p.parquet"
    frame.to_parquet(path)
    rows = read_rows(data([path]))
    assert rows[0].prompt == ({"role": "user", "content": "a"},)
    assert rows[0].extra_info == {"index": 0, "tags": [1, 2]}
    assert type(rows[0].ground_truth) is int


def test_files_are_read_in_order_with_a_custom_prompt_key_and_max_rows(tmp_path, tokenizer):
    def rows(tag, n):
        return [verl_row("unused") | {"question": f"{tag}{i}"} for i in range(n)]

    first = write_parquet(tmp_path / "a.parquet", rows("a", 3))
    second = write_jsonl(tmp_path / "b.jsonl", rows("b", 3))
    config = data([first, second], prompt_key="question", max_rows=5)
    dataset = load_prompt_dataset(config, tokenizer)
    assert [p.text for p in dataset.prompts] == ["a0", "a1", "a2", "b0", "b1"]
    assert str(dataset[3].row.place) == f"{second}: line 1"
    assert dataset.stats.rows_read == 5


def test_overlong_prompts_are_dropped_truncated_on_the_left_or_an_error(tmp_path, tokenizer):
    lengths = [3, 10, 6, 12]  # characters; + 3 template tokens each
    rows = [verl_row("x" * n) | {"prompt": "y" * n} for n in lengths]
    path = write_jsonl(tmp_path / "t.jsonl", rows)

    dropped = load_prompt_dataset(data([path], max_prompt_tokens=8), tokenizer)
    assert [len(p.token_ids) for p in dropped.prompts] == [3, 6]
    assert [p.index for p in dropped.prompts] == [0, 1]
    assert (dropped.stats.dropped_overlong, dropped.stats.truncated) == (2, 0)
    assert "2 dropped as too long" in dropped.stats.notes()[0]

    cut = load_prompt_dataset(
        data([path], max_prompt_tokens=8, overlong_prompts="truncate"), tokenizer
    )
    assert [len(p.token_ids) for p in cut.prompts] == [3, 8, 6, 8]
    assert cut.stats.truncated == 2 and cut[1].truncated and not cut[0].truncated

    # left truncation keeps the end of the prompt, where the generation prompt is
    chat = write_jsonl(tmp_path / "c.jsonl", [verl_row("abcdefgh")])
    kept = load_prompt_dataset(
        data([chat], max_prompt_tokens=5, overlong_prompts="truncate"), tokenizer
    )
    assert list(kept[0].token_ids) == [*char_ids("fgh"), END, ASSISTANT]

    with pytest.raises(DatasetError) as err:
        load_prompt_dataset(data([path], max_prompt_tokens=8, overlong_prompts="error"), tokenizer)
    assert str(err.value).startswith(f"{path}: line 2: the prompt has 10 tokens, more than 8")


def test_the_models_context_limits_prompts_when_no_max_is_set(tmp_path, tokenizer):
    path = write_jsonl(tmp_path / "t.jsonl", [{**verl_row("x"), "prompt": "z" * 20}])
    with pytest.raises(DatasetError, match="context leaves 16 tokens"):
        load_prompt_dataset(
            data([path], max_prompt_tokens=None, overlong_prompts="error"),
            tokenizer,
            context_tokens=16,
        )
    with pytest.raises(DatasetError, match="all 1 prompts are longer than 16"):
        load_prompt_dataset(data([path], max_prompt_tokens=None), tokenizer, context_tokens=16)


def test_fingerprint_follows_the_content(tmp_path, tokenizer):
    def fingerprint(rows):
        return load_prompt_dataset(data([write_jsonl(tmp_path / "f.jsonl", rows)]), tokenizer)

    base = [verl_row("a", answer=1), verl_row("b", answer=2)]
    same = fingerprint(base).fingerprint
    assert fingerprint(base).fingerprint == same
    assert fingerprint([base[1], base[0]]).fingerprint != same
    assert fingerprint([base[0], verl_row("b", answer=3)]).fingerprint != same


def _error(tmp_path, tokenizer, path, **fields) -> str:
    with pytest.raises(DatasetError) as err:
        load_prompt_dataset(data([path], **fields), tokenizer)
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"data_source": "s", "reward_model": {"ground_truth": 1}}, "no field 'prompt'"),
        ({**verl_row("a"), "prompt": 7}, "prompt: expected a list of chat messages or a string"),
        ({**verl_row("a"), "prompt": []}, "the list of chat messages is empty"),
        ({**verl_row("a"), "prompt": ""}, "empty string"),
        ({**verl_row("a"), "prompt": ["hi"]}, "prompt[0]: expected a message"),
        ({**verl_row("a"), "prompt": [{"role": "user"}]}, "prompt[0].content: expected a string"),
        ({**verl_row("a"), "data_source": 3}, "data_source: expected a string, got a number"),
        ({k: v for k, v in verl_row("a").items() if k != "data_source"}, "no field 'data_source'"),
        ({**verl_row("a"), "reward_model": {"style": "rule"}}, "with a ground_truth"),
        ({**verl_row("a"), "extra_info": [1]}, "extra_info: expected a mapping"),
        ([1, 2], "expected an object with fields, got a list"),
    ],
)
def test_each_bad_row_names_file_line_and_field(tmp_path, tokenizer, row, expected):
    path = write_jsonl(tmp_path / "bad.jsonl", [verl_row("fine"), row])
    message = _error(tmp_path, tokenizer, path)
    assert message.startswith(f"{path}: line 2: ") and expected in message


def test_bad_parquet_rows_name_the_row_index(tmp_path, tokenizer):
    rows = [verl_row("fine"), verl_row("fine"), {**verl_row("x"), "prompt": None}]
    rows[0]["prompt"] = rows[1]["prompt"] = [{"role": "user", "content": "ok"}]
    path = write_parquet(tmp_path / "bad.parquet", rows)
    message = _error(tmp_path, tokenizer, path)
    assert message.startswith(f"{path}: row 2: prompt: expected") and "got null" in message
    missing_key = _error(tmp_path, tokenizer, path, prompt_key="question")
    assert "no field 'question' (data.prompt_key)" in missing_key


def test_bad_files_are_one_clear_error(tmp_path, tokenizer):
    assert "no such file" in _error(tmp_path, tokenizer, tmp_path / "none.parquet")
    folder = tmp_path / "dir.jsonl"
    folder.mkdir()
    assert "not a file" in _error(tmp_path, tokenizer, folder)
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    assert "the file is empty" in _error(tmp_path, tokenizer, empty)
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n  \n")
    assert "the file has no rows" in _error(tmp_path, tokenizer, blank)
    no_rows = write_parquet(tmp_path / "none_rows.parquet", [])
    assert "the file has no rows" in _error(tmp_path, tokenizer, no_rows)
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"not parquet at all")
    assert "not a readable Parquet file" in _error(tmp_path, tokenizer, garbage)
    broken = tmp_path / "broken.jsonl"
    write_jsonl(broken, [verl_row("fine")])
    broken.write_text(broken.read_text() + '{"prompt": \n')
    assert f"{broken}: line 2: not valid JSON" in _error(tmp_path, tokenizer, broken)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"prompt": "caf\xe9"}\n')
    assert "not UTF-8 text" in _error(tmp_path, tokenizer, latin)


def test_chat_prompts_need_a_chat_template(tmp_path, tokenizer):
    from transformers import PreTrainedTokenizerFast

    bare = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer)
    path = write_jsonl(tmp_path / "t.jsonl", [verl_row("hello")])
    with pytest.raises(DatasetError, match="line 1: prompt holds chat messages but the model"):
        load_prompt_dataset(data([path]), bare)
