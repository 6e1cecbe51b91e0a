"""Small scenario configs for the twin's tests: fast to simulate, with known shapes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from dynaresize.config_io import deep_merge
from dynaresize.twin.config import ScenarioConfig, load_config

SHIPPED_CONFIGS = Path(__file__).resolve().parents[1] / "dynaresize" / "configs"

BASE: dict[str, Any] = {
    "name": "tiny",
    "cluster": {
        "gpus_per_node": 8,
        "intra_node_bandwidth_gbps": 400,
        "gpu_memory_gb": 96,
        "candidate_allocations": ["6:2", "5:3", "4:4", "3:5"],
        "initial_allocation": "6:2",
    },
    "model": {"num_params_b": 8.2},
    "workload": {
        "name": "tiny",
        "samples_per_step": 32,
        "prompt_median_tokens": 3000,
        "prompt_sigma": 0.2,
        "components": [
            {"name": "short", "weight": 0.6, "median_tokens": 100, "sigma": 0.5},
            {"name": "long", "weight": 0.4, "median_tokens": 320, "sigma": 0.5},
        ],
        "max_response_tokens": 8192,
        "regime_switches": [{"at_step": 12, "length_scale": 5.0}],
    },
    "costs": {
        "rollout": {
            "decode_base_s_per_iter": 0.001,
            "decode_s_per_active_seq": 0.0023,
            "prefill_s_per_token": 0.00004,
            "kv_capacity_tokens_per_replica": None,
        },
        "train": {"s_per_token_one_gpu": 0.00066},
        "sync": {"gather_s_per_gb": 0.1},
    },
    "simulation": {"num_steps": 30, "seed": 3},
}


def preset_scenario(
    preset: str, *, samples_per_step: int, num_steps: int, **overrides: Any
) -> ScenarioConfig:
    """The tiny scenario's cluster with an 8B model and the default costs, on a workload preset:
    the shape the benchmarks and the optimum and replay tests share."""
    data = {
        "cluster": copy.deepcopy(BASE["cluster"]),
        "model": {"num_params_b": 8},
        "workload": {"preset": preset, "samples_per_step": samples_per_step},
        "simulation": {"num_steps": num_steps},
    }
    return ScenarioConfig.model_validate(deep_merge(data, overrides))


def scenario(**overrides: Any) -> ScenarioConfig:
    """The tiny scenario with nested overrides, e.g. scenario(pipeline={"mode": "sync"})."""
    return ScenarioConfig.model_validate(deep_merge(copy.deepcopy(BASE), overrides))


def raw(**overrides: Any) -> dict[str, Any]:
    return deep_merge(copy.deepcopy(BASE), overrides)


def shipped_scenario(name: str) -> ScenarioConfig:
    """A scenario shipped in dynaresize/configs (`example`, `paper`), read as the twin reads any
    scenario file: by path, without the command layer."""
    return load_config(SHIPPED_CONFIGS / f"{name}.yaml")
