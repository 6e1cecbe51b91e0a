"""`rollout_engine.release: auto` (the default): resident engines where the memory check says one
on every worker fits, else on demand; an explicit release always wins; the trace note gives the
figures. No Ray, no model built: well under a second."""

from __future__ import annotations

import pytest

from dynaresize.executor.cluster.engine_memory import (
    FIT_FRACTION,
    EngineMemory,
    MemoryBudget,
    choose_release,
    engine_memory,
    resolve_release,
)
from dynaresize.executor.config import LiveConfig
from dynaresize.executor.engines.config import EngineRelease
from dynaresize.executor.rl.task import TOKENIZER

MIB = 1024**2
GIB = 1024**3


def tiny(**release: str) -> LiveConfig:
    """The tiny preset (2 layers, 2 KV heads of 16 dims, float32), 8 prompts x 4 samples."""
    section = {"rollout_engine": release} if release else {}
    return LiveConfig.model_validate(
        {
            "prompts_per_step": 8,
            "samples_per_prompt": 4,
            "max_response_tokens": 48,
            "task": {"max_count": 20},
            **section,
        }
    )


def test_the_default_release_is_auto() -> None:
    assert LiveConfig().rollout_engine.release is EngineRelease.AUTO


def test_the_estimate_of_a_known_shape_is_the_closed_form() -> None:
    memory = engine_memory(tiny())
    samples, seq_tokens = 8 * 4, (1 + 2 + 3) + 48  # `<bos>`, "20", "*", letter, "="; response
    assert memory.kv_cache_bytes == samples * seq_tokens * 2 * 2 * 16 * 2 * 4
    assert memory.working_bytes == samples * TOKENIZER.vocab_size * 4  # one step's fp32 logits
    vllm = LiveConfig.model_validate(
        {"rollout_engine": {"kind": "vllm", "vllm": {"kv_cache_memory_gb": 0.5}}}
    )
    assert engine_memory(vllm) == EngineMemory(kv_cache_bytes=GIB // 2, working_bytes=0)


def test_the_choice_flips_when_the_memory_is_below_the_estimate() -> None:
    memory = EngineMemory(kv_cache_bytes=10 * MIB, working_bytes=2 * MIB)
    need = memory.per_worker_bytes * 4
    roomy = MemoryBudget(
        available_bytes=int(need / FIT_FRACTION), workers_sharing=4, source="host memory available"
    )
    tight = MemoryBudget(
        available_bytes=int(need / FIT_FRACTION) - 1,
        workers_sharing=4,
        source="host memory available",
    )
    assert choose_release(tiny(), memory, roomy).release is EngineRelease.KEEP
    assert choose_release(tiny(), memory, tight).release is EngineRelease.DESTROY


def test_an_explicit_release_wins_over_the_check() -> None:
    huge = EngineMemory(kv_cache_bytes=10**15, working_bytes=0)
    nothing = MemoryBudget(available_bytes=1, workers_sharing=8, source="host memory available")
    plenty = MemoryBudget(available_bytes=10**15, workers_sharing=1, source="host memory")
    small = EngineMemory(kv_cache_bytes=1, working_bytes=0)
    kept = choose_release(tiny(release="keep"), huge, nothing)
    assert (
        kept.release is EngineRelease.KEEP and kept.note == "rollout engines: keep (as configured)"
    )
    assert choose_release(tiny(release="destroy"), small, plenty).release is EngineRelease.DESTROY
    old = LiveConfig.model_validate({"rollout_engines": "on_demand"})
    config, choice = resolve_release(old, local=True)
    assert config is old and choice.release is EngineRelease.DESTROY


def test_the_note_gives_the_figures() -> None:
    memory = EngineMemory(kv_cache_bytes=12 * MIB, working_bytes=MIB // 2)
    budget = MemoryBudget(
        available_bytes=20 * GIB, workers_sharing=4, source="host memory available"
    )
    assert choose_release(tiny(), memory, budget).note == (
        "rollout engines: resident (keep): 12.5 MiB per worker x 4 workers = 50.0 MiB fits in "
        "50% of 20.0 GiB host memory available"
    )
    device = MemoryBudget(available_bytes=GIB, workers_sharing=2, source="device memory of cuda:0")
    big = EngineMemory(kv_cache_bytes=GIB, working_bytes=0)
    assert choose_release(tiny(), big, device).note == (
        "rollout engines: on demand (destroy): 1.0 GiB per worker x 2 workers = 2.0 GiB does not "
        "fit in 50% of 1.0 GiB device memory of cuda:0"
    )


def test_a_local_cpu_run_resolves_against_this_machine_and_a_remote_one_is_not_checked() -> None:
    config, choice = resolve_release(tiny(), local=True)  # the tiny engine: well under 1 MiB
    assert config.rollout_engine.release is EngineRelease.KEEP
    assert choice.note.startswith("rollout engines: resident (keep): ")
    assert choice.note.endswith("host memory available")
    config, choice = resolve_release(tiny(), local=False)
    assert config.rollout_engine.release is EngineRelease.DESTROY
    assert "memory not checked" in choice.note


def test_an_unresolved_auto_acts_as_destroy() -> None:
    assert tiny().rollout_engines.value == "on_demand"
    with pytest.raises(ValueError, match="auto"):
        LiveConfig.model_validate({"rollout_engine": {"release": "sometimes"}})


def test_a_run_written_before_auto_resumes_with_the_new_default(tmp_path) -> None:
    """Such a run's config.json says `release: destroy`; a resume with the same config (now
    `auto`) continues it: the release changes no sample and no weight."""
    import torch

    from dynaresize.executor.run_folder import checkpoint as ckpt
    from dynaresize.executor.run_folder.resume_check import CONFIG_FILE, check_resume
    from dynaresize.policies.types import Allocation

    live = {"num_workers": 2, "initial_allocation": "1:1", "num_steps": 4}
    before = LiveConfig.model_validate(live | {"rollout_engine": {"release": "destroy"}})
    (tmp_path / CONFIG_FILE).write_text(before.model_dump_json())
    vectors = {k: torch.zeros(4) for k in ckpt.VECTOR_KEYS}
    split = Allocation.parse("1:1")
    ckpt.save(
        tmp_path,
        ckpt.Checkpoint(
            next_step=2,
            weights_version=2,
            allocation=split,
            vectors=vectors,
            pending_batch=None,
            num_resizes=0,
        ),
    )
    note = check_resume(LiveConfig.model_validate(live), tmp_path, ckpt.load(tmp_path))
    assert note.changed == {"rollout_engine.release": ("destroy", "auto")}
