"""Tokens per second of the project's KV-cache sampler against Hugging Face `generate`.

Same model (random init, Qwen2-style), same batch of random prompts, same sampling settings, in
one process. Every sample generates exactly `--max-new-tokens` tokens (no end-of-sequence), so
both engines produce the same number of tokens and tokens/s compare directly. Also checks on the
device that CUDA-graph decoding gives the same greedy tokens as eager decoding.

    python3 benchmarks/bench_sampler.py --device cuda --preset qwen2-0.5b
    python3 benchmarks/bench_sampler.py --device cpu --preset tiny  # smoke run

Writes sampler_<tag>.json and sampler_<tag>.md to --out.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from dynaresize.executor.engines.hf_engine import HFGenerateEngine
from dynaresize.executor.engines.interface import GenerationRequest, SamplingParams
from dynaresize.executor.engines.sampler import KVCacheSampler, SamplerConfig
from dynaresize.executor.rl.model import build_model, count_parameters
from dynaresize.executor.rl.model_spec import QWEN2_VOCAB_SIZE, ModelSpec


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--preset", default="qwen2-0.5b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hf-repeats", type=int, default=1)
    parser.add_argument("--vocab-size", type=int, default=QWEN2_VOCAB_SIZE)
    parser.add_argument(
        "--sampling-rule", default="inverse_cdf", choices=["inverse_cdf", "gumbel_max"]
    )
    parser.add_argument("--tag", default="h200")
    parser.add_argument("--out", default="benchmarks/results")
    return parser.parse_args()


def make_requests(args: argparse.Namespace, vocab_size: int) -> list[GenerationRequest]:
    generator = torch.Generator().manual_seed(1234)
    prompts = torch.randint(3, vocab_size, (args.batch_size, args.prompt_len), generator=generator)
    return [GenerationRequest(i, 0, tuple(prompts[i].tolist())) for i in range(args.batch_size)]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_engine(engine, requests, params, *, repeats: int, device: torch.device) -> list[float]:
    walls = []
    for step in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        output = engine.generate(requests, params, step=step)
        synchronize(device)
        walls.append(time.perf_counter() - start)
        expected = len(requests) * params.max_new_tokens
        if output.num_generated_tokens != expected:
            raise RuntimeError(
                f"generated {output.num_generated_tokens} tokens, expected {expected}"
            )
    return walls


def greedy_agreement(model, requests, *, max_seq_len: int, new_tokens: int) -> dict:
    """Greedy tokens of graph and eager decoding, compared sample by sample."""
    params = SamplingParams(temperature=0.0, max_new_tokens=new_tokens)
    outputs = {}
    for graphs in (True, False):
        config = SamplerConfig(
            max_batch_size=len(requests), max_seq_len=max_seq_len, cuda_graphs=graphs
        )
        outputs[graphs] = KVCacheSampler(model, config).generate(requests, params, step=0)
    pairs = zip(outputs[True].results, outputs[False].results, strict=True)
    same = sum(a.token_ids == b.token_ids for a, b in pairs)
    return {"greedy_samples": len(requests), "greedy_samples_identical": same}


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    spec = ModelSpec(preset=args.preset, dtype=args.dtype, vocab_size=args.vocab_size)
    model = build_model(spec, device=device)
    requests = make_requests(args, args.vocab_size)
    params = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens
    )
    max_seq_len = args.prompt_len + args.max_new_tokens
    total_tokens = args.batch_size * args.max_new_tokens
    print(f"model {args.preset}: {count_parameters(model) / 1e6:.0f}M parameters, {args.dtype}")

    results: dict[str, dict] = {}
    for name, graphs in (("kv_sampler_cuda_graphs", True), ("kv_sampler_eager", False)):
        if graphs and device.type != "cuda":
            continue
        config = SamplerConfig(
            max_batch_size=args.batch_size,
            max_seq_len=max_seq_len,
            cuda_graphs=graphs,
            sampling_rule=args.sampling_rule,
        )
        engine = KVCacheSampler(model, config)
        start = time.perf_counter()
        engine.warmup(params)
        engine.generate(requests[:2], params.model_copy(update={"max_new_tokens": 4}), step=99)
        warmup_s = time.perf_counter() - start
        repeats = args.repeats if graphs or device.type != "cuda" else 1  # eager GPU is slow
        walls = time_engine(engine, requests, params, repeats=repeats, device=device)
        results[name] = summary(walls, total_tokens, warmup_s=warmup_s)
        print(name, results[name])
        del engine

    check = {}
    if device.type == "cuda":
        check = greedy_agreement(
            model, requests[:8], max_seq_len=args.prompt_len + 64, new_tokens=64
        )
        print("graph vs eager greedy", check)

    hf = HFGenerateEngine(model, pad_token_id=0)
    start = time.perf_counter()
    hf.generate(requests[:2], params.model_copy(update={"max_new_tokens": 4}), step=99)
    warmup_s = time.perf_counter() - start
    walls = time_engine(hf, requests, params, repeats=args.hf_repeats, device=device)
    results["hf_generate"] = summary(walls, total_tokens, warmup_s=warmup_s)
    print("hf_generate", results["hf_generate"])

    best = "kv_sampler_cuda_graphs" if "kv_sampler_cuda_graphs" in results else "kv_sampler_eager"
    speedup = results[best]["tokens_per_s"] / results["hf_generate"]["tokens_per_s"]
    record = {
        "config": vars(args),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "num_parameters": count_parameters(model),
        "results": results,
        "speedup_vs_hf_generate": speedup,
        "graph_vs_eager_greedy": check,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"sampler_{args.tag}.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / f"sampler_{args.tag}.md").write_text(markdown(record))
    print(f"speedup of {best} over HF generate: {speedup:.1f}x")


def summary(walls: list[float], total_tokens: int, *, warmup_s: float) -> dict:
    median = statistics.median(walls)
    return {
        "wall_s": walls,
        "median_wall_s": median,
        "tokens_per_s": total_tokens / median,
        "warmup_s": warmup_s,
    }


def markdown(record: dict) -> str:
    cfg = record["config"]
    lines = [
        f"# Sampler throughput on {record['device_name']}",
        "",
        f"Model `{cfg['preset']}` ({record['num_parameters'] / 1e6:.0f}M parameters, random init, "
        f"{cfg['dtype']}), batch {cfg['batch_size']}, prompt {cfg['prompt_len']} tokens, "
        f"{cfg['max_new_tokens']} new tokens per sample (no end-of-sequence), temperature "
        f"{cfg['temperature']}, top-p {cfg['top_p']}; torch {record['torch']}.",
        "",
        "| engine | median wall (s) | tokens/s | warm-up incl. graph capture (s) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, row in record["results"].items():
        lines.append(
            f"| {name} | {row['median_wall_s']:.2f} | {row['tokens_per_s']:,.0f} | "
            f"{row['warmup_s']:.2f} |"
        )
    lines += ["", f"Speed-up over HF `generate`: {record['speedup_vs_hf_generate']:.1f}x."]
    check = record["graph_vs_eager_greedy"]
    if check:
        lines.append(
            f"Greedy tokens, CUDA graphs vs eager: {check['greedy_samples_identical']} of "
            f"{check['greedy_samples']} samples identical over 64 tokens."
        )
    lines += [
        "",
        "Command: `python3 benchmarks/bench_sampler.py --device cuda "
        f"--preset {cfg['preset']} --batch-size {cfg['batch_size']} "
        f"--max-new-tokens {cfg['max_new_tokens']}`",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
