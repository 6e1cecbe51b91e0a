"""The parts of the vLLM-on-CUDA path that run without a GPU: the engine's memory share, the
run's fit check and its `auto` choice, the flat weight buffer, the device handle's refusal off
its node, and an engine process that ends at every release and is rebuilt from a warm spare.

`tests/executor/test_vllm_cuda.py` runs the rest on a machine with CUDA and vLLM.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch

from dynaresize.config_io import ConfigError
from dynaresize.executor.cluster.engine_memory import (
    MemoryBudget,
    check_vllm_fits,
    choose_release,
    engine_memory,
    model_bytes,
)
from dynaresize.executor.config import LiveConfig
from dynaresize.executor.engines.build import EngineShape, LocalEngineFactory
from dynaresize.executor.engines.config import (
    EngineKind,
    EngineRelease,
    RolloutEngineConfig,
    VLLMSettings,
)
from dynaresize.executor.engines.device_share import (
    SharedDeviceTensor,
    can_open,
    fill_flat,
    finish_writes,
    node_identity,
    refusal,
)
from dynaresize.executor.engines.interface import GenerationRequest, SamplingParams
from dynaresize.executor.engines.process import EngineProcess
from dynaresize.executor.engines.vllm_adapter import memory_utilization
from dynaresize.executor.rl.model import ModelSpec, build_model, flatten_parameters
from dynaresize.executor.rl.model_spec import QWEN2_VOCAB_SIZE, preset_architecture

GIB = 1 << 30


def test_the_memory_share_is_what_the_engine_is_given_over_the_device() -> None:
    share = memory_utilization(
        weights_bytes=3 * GIB,
        kv_cache_bytes=8 * GIB,
        activation_bytes=2 * GIB,
        device_total_bytes=130 * GIB,
    )
    assert share == pytest.approx(13 / 130, abs=2e-4) and share >= 13 / 130
    with pytest.raises(ValueError, match=r"needs 131.0 GiB .* the device has 130.0 GiB"):
        memory_utilization(
            weights_bytes=1 * GIB,
            kv_cache_bytes=128 * GIB,
            activation_bytes=2 * GIB,
            device_total_bytes=130 * GIB,
        )


def test_batch_invariance_is_off_unless_asked() -> None:
    assert VLLMSettings().batch_invariant is False
    assert VLLMSettings().sleep_level == 2  # a worker loads its weights on every wake anyway


def cuda_vllm(kv_gb: float = 8.0, release: str = "auto") -> LiveConfig:
    return LiveConfig.model_validate(
        {
            "model": {
                "preset": "qwen2-0.5b",
                "dtype": "bfloat16",
                "vocab_size": QWEN2_VOCAB_SIZE,
            },
            "device": "cuda",
            "num_gpus": 1,
            "rollout_engine": {
                "kind": "vllm",
                "release": release,
                "vllm": {"kv_cache_memory_gb": kv_gb},
            },
        }
    )


def test_a_vllm_engine_on_cuda_counts_its_weights_kv_cache_and_activations() -> None:
    live = cuda_vllm()
    weights = model_bytes(live)
    arch = preset_architecture("qwen2-0.5b")
    hidden, inner, layers = (
        arch["hidden_size"],
        arch["intermediate_size"],
        arch["num_hidden_layers"],
    )
    kv = arch["num_key_value_heads"] * hidden // arch["num_attention_heads"]
    per_layer = (hidden + 1) * hidden + 2 * (hidden + 1) * kv + hidden * hidden  # q, k, v, o
    per_layer += 3 * hidden * inner + 2 * hidden  # the MLP and two norms
    embeddings = QWEN2_VOCAB_SIZE * hidden  # tied: counted once
    assert weights == (embeddings + layers * per_layer + hidden) * 2  # bf16
    memory = engine_memory(live)
    assert memory.kv_cache_bytes == 8 * GIB
    assert memory.working_bytes == weights + 2 * GIB


def test_a_vllm_run_that_cannot_fit_stops_with_one_line_naming_the_figures() -> None:
    live = cuda_vllm(kv_gb=40.0)
    memory = engine_memory(live)
    device = MemoryBudget(available_bytes=140 * GIB, workers_sharing=4, source="device cuda:0")
    with pytest.raises(ConfigError, match=r"4 workers x .* does not fit in 140.0 GiB") as caught:
        check_vllm_fits(live, memory, device)
    assert "\n" not in str(caught.value)
    check_vllm_fits(cuda_vllm(kv_gb=8.0), engine_memory(cuda_vllm(kv_gb=8.0)), device)


def test_auto_chooses_sleep_for_vllm_on_cuda_where_it_fits() -> None:
    live = cuda_vllm(kv_gb=8.0)
    roomy = MemoryBudget(available_bytes=1000 * GIB, workers_sharing=4, source="device cuda:0")
    tight = replace(roomy, available_bytes=20 * GIB)
    assert choose_release(live, engine_memory(live), roomy).release is EngineRelease.SLEEP
    assert choose_release(live, engine_memory(live), tight).release is EngineRelease.DESTROY
    explicit = cuda_vllm(release="destroy")
    assert choose_release(explicit, engine_memory(explicit), roomy).release is (
        EngineRelease.DESTROY
    )


def test_fill_flat_lays_the_parameters_out_in_order_in_place() -> None:
    parts = [torch.arange(6.0).view(2, 3), torch.tensor([7.0]), torch.ones(2, 2)]
    buffer = torch.full((11,), -1.0)
    assert fill_flat(buffer, parts) is buffer
    assert torch.equal(buffer, torch.cat([p.reshape(-1) for p in parts]))
    finish_writes(buffer)  # nothing to wait for on the host
    with pytest.raises(ValueError, match="parameters hold 11"):
        fill_flat(torch.empty(10), parts)


def test_a_device_buffer_is_not_opened_off_its_node_or_without_its_device() -> None:
    handle = SharedDeviceTensor(
        rebuild_args=(), device_uuid="GPU-none", node=node_identity(), numel=4, dtype="bfloat16"
    )
    assert not can_open(handle)  # no device with that UUID here
    assert refusal(handle) == "device GPU-none is not visible in this process"
    far = replace(handle, node="elsewhere/boot")
    assert not can_open(far)
    assert refusal(far) == f"device buffer of node elsewhere/boot opened on {node_identity()}"


MODEL = {
    "model_type": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 48,
    "max_position_embeddings": 128,
    "tie_word_embeddings": True,
}


@pytest.mark.usefixtures("one_torch_thread")
def test_an_engine_process_ended_at_each_release_is_rebuilt_from_a_spare(tmp_path) -> None:
    folder = tmp_path / "model"
    model = build_model(ModelSpec(config=MODEL, init_seed=3))
    model.save_pretrained(folder)
    flat = flatten_parameters(model)
    other = flat + 0.5 * torch.randn(flat.shape, generator=torch.Generator().manual_seed(1))
    factory = LocalEngineFactory(
        kind=EngineKind.OWN,
        model=ModelSpec(path=folder),
        shape=EngineShape(max_batch_size=8, max_seq_len=32, pad_token_id=0),
    )
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=4)
    requests = [GenerationRequest(p, 0, (1, 2 + p, 3 + p)) for p in range(6)]
    with EngineProcess(factory, name="restart", end_on_release=True) as process:
        process.load_weights(other)
        first = [r.token_ids for r in process.generate(requests, params, step=0).results]
        for _cycle in range(2):
            pid = process.pid
            process.release()
            assert process.is_alive and not process.is_running
            assert pid is not None and not _running(pid)  # the engine's process is gone
            process.rebuild()  # the spare builds it and loads the weights loaded last
            assert process.pid != pid
            again = [r.token_ids for r in process.generate(requests, params, step=0).results]
            assert again == first
            assert process.last_load is not None and process.last_load.digest
    assert not _running(process.pid or 0)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not running
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False


def test_the_trace_notes_say_which_sample_semantics_a_vllm_run_on_cuda_keeps() -> None:
    plain = RolloutEngineConfig(kind=EngineKind.VLLM)
    invariant = RolloutEngineConfig(kind=EngineKind.VLLM, vllm=VLLMSettings(batch_invariant=True))
    assert plain.semantics_note("cpu") is None
    assert RolloutEngineConfig(kind=EngineKind.OWN).semantics_note("cuda") is None
    assert "not token-identical samples" in (plain.semantics_note("cuda") or "")
    assert "token-identical" in (invariant.semantics_note("cuda") or "")
