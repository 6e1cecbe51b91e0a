"""Local Hugging Face model folders: load (Qwen2, Llama), clear errors, export round trip."""

from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch")

from transformers import AutoModelForCausalLM  # noqa: E402

from dynaresize.executor.engines.interface import GenerationRequest, SamplingParams  # noqa: E402
from dynaresize.executor.engines.sampler import KVCacheSampler, SamplerConfig  # noqa: E402
from dynaresize.executor.job.char_model import (  # noqa: E402
    CharModelSpec,
    ensure_char_model_folder,
    write_char_model_folder,
)
from dynaresize.executor.job.hf_folder import (  # noqa: E402
    ModelFolderError,
    export_hf_folder,
    inspect_model_folder,
    load_model,
    load_model_folder,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = ["What is 12 + 30?", "What is 7 * 6?", "Hi"]


@pytest.fixture(scope="module")
def qwen_folder(tmp_path_factory):
    return write_char_model_folder(tmp_path_factory.mktemp("models") / "qwen")


def prompt_ids(tokenizer) -> list[list[int]]:
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
        )
        for p in PROMPTS
    ]
    return [tokenizer.encode(text, add_special_tokens=False) for text in texts]


def hf_greedy(model, prompts, *, new_tokens=12) -> list[list[int]]:
    out = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        generated = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
        out.append(generated[0, len(prompt) :].tolist())
    return out


def sampler_greedy(model, prompts, *, new_tokens=12) -> list[tuple[int, ...]]:
    engine = KVCacheSampler(model, SamplerConfig(max_batch_size=4, max_seq_len=64))
    requests = [GenerationRequest(i, 0, tuple(p)) for i, p in enumerate(prompts)]
    params = SamplingParams(temperature=0.0, max_new_tokens=new_tokens)
    return [r.token_ids for r in engine.generate(requests, params, step=0).results]


@pytest.mark.parametrize("model_type", ["qwen2", "llama"])
def test_a_built_folder_loads_with_its_tokenizer(tmp_path, model_type):
    spec = CharModelSpec(model_type=model_type, context_tokens=96)
    folder = write_char_model_folder(tmp_path / model_type, spec)
    info = inspect_model_folder(folder)
    assert (info.model_type, info.context_tokens, info.has_chat_template) == (model_type, 96, True)
    assert info.weight_files == ("model.safetensors",)
    loaded = load_model_folder(folder, dtype="bfloat16")
    family = "Qwen2" if model_type == "qwen2" else "Llama"
    assert type(loaded.model).__name__ == f"{family}ForCausalLM"
    assert next(loaded.model.parameters()).dtype == torch.bfloat16
    assert not loaded.model.training
    tokenizer = loaded.tokenizer
    assert info.eos_token_ids == (tokenizer.eos_token_id,) and tokenizer.pad_token_id == 0
    assert len(tokenizer) == loaded.model.config.vocab_size
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "1 + 1"}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<|user|>1 + 1<|end|><|assistant|>"
    text = "#### 42, é"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_export_round_trip_loads_and_generates_the_same_greedy_tokens(tmp_path, qwen_folder):
    loaded = load_model_folder(qwen_folder)
    policy = loaded.model
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # stands for training: the exported weights are not the initial ones
        for param in policy.parameters():
            param.add_(0.5 * torch.randn(param.shape, generator=generator))
    out = export_hf_folder(policy, loaded.tokenizer, tmp_path / "export")

    reloaded = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    for (name, a), (_, b) in zip(
        policy.state_dict().items(), reloaded.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    prompts = prompt_ids(load_model_folder(out).tokenizer)
    assert prompts == prompt_ids(loaded.tokenizer)
    greedy = hf_greedy(policy, prompts)
    assert hf_greedy(reloaded, prompts) == greedy
    assert len({tuple(g) for g in greedy}) > 1  # the prompts lead somewhere different
    assert sampler_greedy(reloaded, prompts) == sampler_greedy(policy, prompts)
    assert not list(tmp_path.glob(".export.export-*"))  # no staging folder left behind


def test_export_never_writes_over_existing_files(tmp_path, qwen_folder):
    loaded = load_model_folder(qwen_folder)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(ModelFolderError, match="already exists and is not an empty folder"):
        export_hf_folder(loaded.model, loaded.tokenizer, taken)
    assert [p.name for p in taken.iterdir()] == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_hf_folder(loaded.model, loaded.tokenizer, empty) == empty
    assert (empty / "model.safetensors").is_file()


def test_ensure_reuses_its_own_folder_and_refuses_others(tmp_path):
    spec = CharModelSpec(init_seed=5)
    folder = ensure_char_model_folder(tmp_path / "m", spec)
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert ensure_char_model_folder(tmp_path / "m", spec) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(ModelFolderError, match="another spec"):
        ensure_char_model_folder(tmp_path / "m", CharModelSpec(init_seed=6))
    other = tmp_path / "other"
    other.mkdir()
    (other / "x").write_text("")
    with pytest.raises(ModelFolderError, match="not an empty folder"):
        ensure_char_model_folder(other, spec)


def copy_without(folder, tmp_path, *names):
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    for name in names:
        (copy / name).unlink()
    return copy


def folder_error(path, **kwargs) -> str:
    with pytest.raises(ModelFolderError) as err:
        load_model_folder(path, **kwargs)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_paths_that_are_no_local_folder(tmp_path, qwen_folder):
    assert "no such folder" in folder_error(tmp_path / "nowhere")
    hub = folder_error("Qwen/Qwen2-0.5B-Instruct")
    assert "never downloaded" in hub and "huggingface-cli download Qwen/Qwen2-0.5B" in hub
    assert "not a folder" in folder_error(qwen_folder / "config.json")


def test_folders_missing_a_part_name_it(tmp_path, qwen_folder):
    assert "no config.json" in folder_error(copy_without(qwen_folder, tmp_path, "config.json"))


def test_missing_weights_are_named(tmp_path, qwen_folder):
    copy = copy_without(qwen_folder, tmp_path, "model.safetensors")
    assert "no weights (*.safetensors)" in folder_error(copy)
    (copy / "pytorch_model.bin").write_bytes(b"")
    assert "pytorch_model.bin is there but pickled weights are not read" in folder_error(copy)


def test_missing_tokenizer_is_named(tmp_path, qwen_folder):
    copy = copy_without(qwen_folder, tmp_path, "tokenizer.json", "tokenizer_config.json")
    assert "no tokenizer (neither tokenizer.json nor tokenizer_config.json)" in folder_error(copy)


def test_a_shard_index_naming_absent_files(tmp_path, qwen_folder):
    copy = copy_without(qwen_folder, tmp_path)
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors"}}
    (copy / "model.safetensors.index.json").write_text(json.dumps(index))
    assert "lists weight files that are not there: model-00001" in folder_error(copy)


def test_a_tokenizer_larger_than_the_vocabulary(tmp_path, qwen_folder):
    copy = copy_without(qwen_folder, tmp_path)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "vocab_size": 200}))
    assert "the tokenizer has 261 tokens but the model's vocabulary" in folder_error(copy)


def test_bad_dtype_and_unloadable_weights(tmp_path, qwen_folder):
    assert "model.dtype: 'int8' is not one of" in folder_error(qwen_folder, dtype="int8")
    copy = copy_without(qwen_folder, tmp_path)
    (copy / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ModelFolderError, match="transformers cannot load this qwen2 model"):
        load_model(copy)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_on_cuda_a_loaded_folder_exports_the_policy_it_generates_with(tmp_path, qwen_folder, dtype):
    loaded = load_model_folder(qwen_folder, dtype=dtype, device="cuda")
    policy = loaded.model
    assert next(policy.parameters()).device.type == "cuda"
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in policy.parameters():
            noise = torch.randn(param.shape, generator=generator).to(param.device, param.dtype)
            param.add_(0.5 * noise)
    out = export_hf_folder(policy, loaded.tokenizer, tmp_path / "export")
    reloaded = load_model_folder(out, dtype=dtype, device="cuda").model
    assert next(reloaded.parameters()).dtype == getattr(torch, dtype)
    for (name, a), (_, b) in zip(
        policy.state_dict().items(), reloaded.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    prompts = prompt_ids(loaded.tokenizer)
    assert sampler_greedy(reloaded, prompts) == sampler_greedy(policy, prompts)
