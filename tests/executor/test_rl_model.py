"""The model builder: presets, config dicts, local paths, flat weights; and the HF baseline."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pydantic import ValidationError  # noqa: E402

from dynaresize.executor.engines.hf_engine import HFGenerateEngine  # noqa: E402
from dynaresize.executor.engines.interface import GenerationRequest, SamplingParams  # noqa: E402
from dynaresize.executor.engines.sampler import KVCacheSampler, SamplerConfig  # noqa: E402
from dynaresize.executor.rl.model import (  # noqa: E402
    build_model,
    count_parameters,
    flatten_parameters,
    hf_config,
    load_flat_parameters,
)
from dynaresize.executor.rl.model_spec import ModelSpec  # noqa: E402
from dynaresize.executor.rl.task import TOKENIZER  # noqa: E402


def test_same_spec_same_weights_and_task_vocabulary():
    first, second = build_model(ModelSpec()), build_model(ModelSpec())
    assert torch.equal(flatten_parameters(first), flatten_parameters(second))
    assert first.config.vocab_size == TOKENIZER.vocab_size
    other = build_model(ModelSpec(init_seed=1))
    assert not torch.equal(flatten_parameters(first), flatten_parameters(other))


def test_gpu_presets_have_the_public_shapes():
    config = hf_config(ModelSpec(preset="qwen2-0.5b", vocab_size=151_936))
    assert (config.hidden_size, config.num_hidden_layers, config.num_key_value_heads) == (
        896,
        24,
        2,
    )
    assert hf_config(ModelSpec(preset="qwen2-1.5b")).hidden_size == 1536


def test_config_dict_of_another_architecture():
    spec = ModelSpec(
        config={
            "model_type": "llama",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
        },
        dtype="bfloat16",
    )
    model = build_model(spec)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert next(model.parameters()).dtype == torch.bfloat16


def test_local_path_round_trip(tmp_path):
    model = build_model(ModelSpec(init_seed=4))
    model.save_pretrained(tmp_path)
    loaded = build_model(ModelSpec(path=tmp_path))
    assert torch.equal(flatten_parameters(model), flatten_parameters(loaded))


def test_flat_parameters_round_trip():
    source, target = build_model(ModelSpec(init_seed=1)), build_model(ModelSpec(init_seed=2))
    flat = flatten_parameters(source)
    assert flat.numel() == count_parameters(source)
    load_flat_parameters(target, flat)
    assert torch.equal(flatten_parameters(target), flat)


def test_bad_specs_name_the_field(tmp_path):
    with pytest.raises(ValidationError, match="only one of"):
        ModelSpec(preset="tiny", config={"model_type": "llama"})
    with pytest.raises(ValidationError, match="model_type"):
        ModelSpec(config={"hidden_size": 8})
    with pytest.raises(ValueError, match=r"model\.config"):
        hf_config(ModelSpec(config={"model_type": "no-such-architecture"}))
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        build_model(ModelSpec(path=tmp_path))


def test_hf_generate_baseline_agrees_with_the_sampler_when_greedy():
    model = build_model(ModelSpec(init_seed=6))
    prompts = [(1, 5, 6, 7), (1, 8, 9), (1, 10, 11, 12, 13)]
    requests = [GenerationRequest(i, 0, p) for i, p in enumerate(prompts)]
    params = SamplingParams(temperature=0.0, max_new_tokens=10)
    hf = HFGenerateEngine(model, pad_token_id=TOKENIZER.pad_token_id).generate(
        requests, params, step=0
    )
    own = KVCacheSampler(model, SamplerConfig(max_seq_len=24)).generate(requests, params, step=0)
    assert [r.token_ids for r in hf.results] == [r.token_ids for r in own.results]
    assert hf.num_generated_tokens == 30
