"""A live run with vLLM on CUDA (one device shared by three workers): with batch-invariant
kernels, a run with resizes generates the same samples and reaches the same trainer state as
one without (the trainer state within the resize tests' bound at bfloat16's roundoff: two
trainers and one split each step's gradient differently, in bfloat16 kernels). Needs CUDA and
vLLM built for it; skipped elsewhere.

    python -m pytest -q tests/executor/test_live_vllm_cuda.py      # on a machine with CUDA

Two live runs (`release: sleep`: the trainer's engine is built at setup and sleeps; the moves
wake it and put it back to sleep), each a few engine starts at setup and four steps.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.live, pytest.mark.timeout(900)]

if not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None:
    pytest.skip("needs CUDA and vLLM", allow_module_level=True)

from dynaresize.executor.config import LiveConfig  # noqa: E402
from dynaresize.executor.driver import run_live  # noqa: E402
from dynaresize.executor.run_folder import checkpoint as ckpt  # noqa: E402
from dynaresize.executor.run_folder.records import read_lineage  # noqa: E402
from dynaresize.traces.io import read_trace  # noqa: E402
from tests.state_bound import BF16_STATE_RELATIVE_ERROR_BOUND, relative_error  # noqa: E402

FIELDS = {
    "model": {
        "config": {
            "model_type": "qwen2",
            "hidden_size": 256,
            "intermediate_size": 512,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
            "tie_word_embeddings": True,
        },
        "vocab_size": 32,
        "dtype": "bfloat16",
    },
    "device": "cuda",
    "num_gpus": 1,
    "num_workers": 3,
    "initial_allocation": "2:1",
    "candidate_allocations": ["2:1", "1:2"],
    "num_steps": 4,
    "prompts_per_step": 8,
    "samples_per_prompt": 4,
    "max_response_tokens": 32,
    "optimizer": {"lr": 1e-3},
    "checkpoint_every_steps": 2,
    "rollout_engine": {
        "kind": "vllm",
        "release": "sleep",
        "vllm": {"kv_cache_memory_gb": 0.5, "batch_invariant": True},
    },
    "policy": {"kind": "scheduled", "schedule": "1@1:2;2@2:1"},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, _ray_started):
    resized = tmp_path_factory.mktemp("cuda_vllm_resized")
    run_live(LiveConfig.model_validate(FIELDS), out_dir=resized)
    static = tmp_path_factory.mktemp("cuda_vllm_static")
    run_live(LiveConfig.model_validate({**FIELDS, "policy": {"kind": "static"}}), out_dir=static)
    return resized, static


def test_the_moves_wake_engines_instead_of_starting_them(runs):
    resized, _ = runs
    resizes = read_trace(resized / "trace").resizes
    assert len(resizes.resize_id.unique()) == 2
    reinit = resizes[resizes.phase == "rollout_reinit"]
    # a wake and a weight load, never an engine start (20-50 s on a GPU)
    assert (reinit.end_s - reinit.start_s).max() < 5.0


def test_with_and_without_resizes_the_same_samples_and_trainer_state(runs):
    resized, static = runs
    key = lambda r: (r.prompt_id, r.sample_index)  # noqa: E731
    with_moves, without = read_lineage(resized), read_lineage(static)
    assert [(key(r), r.response_tokens) for r in sorted(with_moves, key=key)] == [
        (key(r), r.response_tokens) for r in sorted(without, key=key)
    ]
    a, b = ckpt.load(resized), ckpt.load(static)
    assert a.next_step == b.next_step == FIELDS["num_steps"]
    # two trainers and one split each step's gradient differently, in bfloat16 kernels: the
    # resize tests' bound at bfloat16's roundoff
    for name in ("master", "exp_avg", "exp_avg_sq"):
        error = relative_error(a.vectors[name], b.vectors[name])
        assert error < BF16_STATE_RELATIVE_ERROR_BOUND, (name, error)
