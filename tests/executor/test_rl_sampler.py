"""The KV-cache sampler: exact against a no-cache forward, shrinking batch, per-sample seeding."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from dynaresize.executor.engines.decoder import UnsupportedModelError  # noqa: E402
from dynaresize.executor.engines.interface import (  # noqa: E402
    FinishReason,
    GenerationRequest,
    RolloutEngine,
    SamplingParams,
)
from dynaresize.executor.engines.sampler import KVCacheSampler, SamplerConfig, SamplerInputError  # noqa: E402
from dynaresize.executor.engines.sampling import (  # noqa: E402
    SamplingRule,
    _mul32,
    choose_tokens,
    mix32,
    sample_keys,
)
from dynaresize.executor.rl.model import build_model, flatten_parameters  # noqa: E402
from dynaresize.executor.rl.model_spec import ModelSpec  # noqa: E402
from dynaresize.executor.rl.task import TOKENIZER  # noqa: E402

EOS = TOKENIZER.eos_token_id


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    return build_model(ModelSpec(init_seed=3))


def requests_for(prompt_ids, *, num_samples=1):
    generator = torch.Generator().manual_seed(7)
    out = []
    for prompt_id in prompt_ids:
        length = 3 + prompt_id % 5
        prompt = torch.randint(3, TOKENIZER.vocab_size, (length,), generator=generator).tolist()
        prompt = [TOKENIZER.bos_token_id, *prompt]
        out += [GenerationRequest(prompt_id, i, tuple(prompt)) for i in range(num_samples)]
    return out


def test_sampler_is_a_rollout_engine(model):
    assert isinstance(KVCacheSampler(model, SamplerConfig(max_seq_len=32)), RolloutEngine)


def test_greedy_kv_decoding_matches_no_cache_forward(model):
    requests = requests_for(range(5))
    params = SamplingParams(temperature=0.0, max_new_tokens=24)
    sampler = KVCacheSampler(model, SamplerConfig(max_seq_len=40, prefill_chunk_rows=2))
    output = sampler.generate(requests, params, step=0)
    for request, result in zip(requests, output.results, strict=True):
        ids = list(request.prompt_token_ids)
        with torch.no_grad():
            for _ in range(params.max_new_tokens):
                logits = model(torch.tensor([ids])).logits[0, -1]
                ids.append(int(logits.argmax()))
        assert list(result.token_ids) == ids[len(request.prompt_token_ids) :]
        assert result.finish_reason == FinishReason.LENGTH


def test_finished_sequences_leave_the_batch(model):
    requests = requests_for(range(6), num_samples=4)
    params = SamplingParams(temperature=1.0, max_new_tokens=40, eos_token_id=EOS, seed=5)
    output = KVCacheSampler(model, SamplerConfig(max_seq_len=64)).generate(requests, params, step=1)
    lengths = [r.num_tokens for r in output.results]
    active = output.active_batch_per_step
    # each decode step computes exactly the samples still running: one token per live row
    assert sum(active) == sum(n - 1 for n in lengths)
    assert len(active) == max(lengths) - 1
    assert all(a >= b for a, b in itertools.pairwise(active))
    assert active[-1] < len(requests)  # the batch really shrank
    for result in output.results:
        assert EOS not in result.token_ids[:-1]
        if result.finish_reason == FinishReason.STOP:
            assert result.token_ids[-1] == EOS
        else:
            assert result.num_tokens == params.max_new_tokens
    assert {r.finish_reason for r in output.results} == {FinishReason.STOP, FinishReason.LENGTH}
    finish = {r.num_tokens: r.finish_s for r in output.results}
    assert finish[min(finish)] <= finish[max(finish)]


@pytest.mark.parametrize("rule", list(SamplingRule))
def test_samples_do_not_depend_on_batch_composition(model, rule):
    params = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=30, eos_token_id=EOS)
    full = requests_for(range(8), num_samples=3)
    config = SamplerConfig(max_seq_len=48, sampling_rule=rule)
    reference = KVCacheSampler(model, config).generate(full, params, step=4)
    tokens = {(r.prompt_id, r.sample_index): r.token_ids for r in reference.results}
    others = requests_for(range(100, 104), num_samples=2)
    compositions = [
        full[::-1],
        full[5:11] + others,
        [full[7]],
    ]
    small = KVCacheSampler(
        model, config.model_copy(update={"max_batch_size": 5, "prefill_chunk_rows": 3})
    )
    for requests in compositions:
        output = small.generate(requests, params, step=4)
        for result in output.results:
            if result.prompt_id < 100:
                assert result.token_ids == tokens[(result.prompt_id, result.sample_index)]
    other_step = small.generate(full, params, step=5)
    assert any(r.token_ids != tokens[(r.prompt_id, r.sample_index)] for r in other_step.results)


def test_load_weights_flat_and_state(model):
    other = build_model(ModelSpec(init_seed=11))
    requests = requests_for(range(3))
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    expected = KVCacheSampler(other, SamplerConfig(max_seq_len=32)).generate(
        requests, params, step=0
    )
    target = build_model(ModelSpec(init_seed=3))
    sampler = KVCacheSampler(target, SamplerConfig(max_seq_len=32))
    sampler.load_weights(flatten_parameters(other))
    got = sampler.generate(requests, params, step=0)
    assert [r.token_ids for r in got.results] == [r.token_ids for r in expected.results]
    sampler.load_weights(dict(model.named_parameters()))
    assert torch.equal(flatten_parameters(target), flatten_parameters(model))
    with pytest.raises(ValueError, match="shape"):
        sampler.load_weights(torch.zeros(5))


def test_bad_requests_name_the_request(model):
    sampler = KVCacheSampler(model, SamplerConfig(max_seq_len=16))
    params = SamplingParams(max_new_tokens=12)
    with pytest.raises(SamplerInputError, match=r"prompt 4, sample 0.*max_seq_len"):
        sampler.generate([GenerationRequest(4, 0, tuple(range(3, 13)))], params, step=0)
    twice = [GenerationRequest(1, 0, (1, 3)), GenerationRequest(1, 0, (1, 4))]
    with pytest.raises(SamplerInputError, match="twice"):
        sampler.generate(twice, params, step=0)


def test_unsupported_architecture_is_refused():
    spec = ModelSpec(config={"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2})
    with pytest.raises(UnsupportedModelError, match="gpt2"):
        KVCacheSampler(build_model(spec), SamplerConfig(max_seq_len=16))


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_mul32_is_exact_modular_multiplication(x, c):
    assert int(_mul32(torch.tensor([x]), c)) == (x * c) % 2**32


def test_keys_are_distinct_and_in_range():
    ids = torch.arange(2000)
    keys = sample_keys(seed=1, step=2, prompt_ids=ids // 4, sample_indices=ids % 4)
    assert keys.unique().numel() == 2000
    assert int(keys.min()) >= 0 and int(keys.max()) < 2**32
    assert int(mix32(torch.tensor([0]))) == 0  # why combine() adds a constant


@pytest.mark.parametrize("rule", list(SamplingRule))
def test_token_frequencies_follow_the_distribution(rule):
    num = 40_000
    logits = torch.tensor([0.0, 1.0, 2.0, -1.0]).repeat(num, 1)
    keys = sample_keys(
        seed=0, step=0, prompt_ids=torch.arange(num), sample_indices=torch.zeros(num).long()
    )
    positions = torch.full((num,), 9)
    probs = torch.softmax(logits[0], -1)
    tokens = choose_tokens(
        logits, keys=keys, positions=positions, temperature=1.0, top_p=1.0, rule=rule
    )
    freq = torch.bincount(tokens, minlength=4) / num
    assert torch.allclose(freq, probs, atol=0.01)
    # top-p 0.7 keeps tokens 2 and 1 (0.64 + 0.24): renormalised over the nucleus
    tokens = choose_tokens(
        logits, keys=keys, positions=positions, temperature=1.0, top_p=0.7, rule=rule
    )
    freq = torch.bincount(tokens, minlength=4) / num
    nucleus = probs * torch.tensor([0.0, 1.0, 1.0, 0.0])
    assert torch.allclose(freq, nucleus / nucleus.sum(), atol=0.01)
    hot = choose_tokens(logits, keys=keys, positions=positions, temperature=0.0, top_p=1.0)
    assert bool((hot == 2).all())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graph_decoding_matches_eager():
    gpu_model = build_model(ModelSpec(init_seed=3), device="cuda")
    requests = requests_for(range(6), num_samples=2)
    params = SamplingParams(temperature=0.0, max_new_tokens=20)
    outputs = [
        KVCacheSampler(gpu_model, SamplerConfig(max_seq_len=32, cuda_graphs=graphs)).generate(
            requests, params, step=0
        )
        for graphs in (True, False)
    ]
    assert [r.token_ids for r in outputs[0].results] == [r.token_ids for r in outputs[1].results]
    for graphed, eager in zip(outputs[0].results, outputs[1].results, strict=True):
        assert graphed.logprobs is not None and eager.logprobs is not None
        assert torch.allclose(
            torch.tensor(graphed.logprobs), torch.tensor(eager.logprobs), atol=1e-4
        )


def test_gumbel_max_resists_last_bit_changes_of_the_logits():
    """Why `gumbel_max` exists: over a large flat vocabulary a tiny change of the logits (what
    another batch shape can cause) moves inverse-CDF choices but almost never Gumbel-max ones."""
    rows, vocab = 1024, 2048
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0)) * 0.1
    nudged = logits + 1e-3 * torch.randn(rows, vocab, generator=torch.Generator().manual_seed(1))
    keys = sample_keys(
        seed=0, step=0, prompt_ids=torch.arange(rows), sample_indices=torch.zeros(rows).long()
    )
    positions = torch.full((rows,), 3)
    flips = {}
    for rule in SamplingRule:
        picks = [
            choose_tokens(x, keys=keys, positions=positions, temperature=1.0, top_p=1.0, rule=rule)
            for x in (logits, nudged)
        ]
        flips[rule] = int((picks[0] != picks[1]).sum())
    assert flips[SamplingRule.GUMBEL_MAX] <= 1
    assert flips[SamplingRule.INVERSE_CDF] >= 5
