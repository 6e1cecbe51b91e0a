"""How often a sample's tokens stay the same when only the way it is generated changes.

For each model dtype: the same requests are generated (a) with CUDA graphs and eagerly, and
(b) in the full batch and in batches of another composition (reversed, split into waves of 3,
each alone). Counts samples whose tokens are identical, for greedy decoding and for sampling at
temperature 1. docs/sampler.md explains why float rounding can make them differ.

    python3 benchmarks/sampler_consistency.py --device cuda
    python3 benchmarks/sampler_consistency.py --device cpu --preset tiny

Writes sampler_consistency_<tag>.json and .md to --out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from dynaresize.executor.engines.interface import GenerationRequest, SamplingParams
from dynaresize.executor.engines.sampler import KVCacheSampler, SamplerConfig
from dynaresize.executor.rl.model import build_model
from dynaresize.executor.rl.model_spec import QWEN2_VOCAB_SIZE, ModelSpec


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--preset", default="qwen2-0.5b")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--vocab-size", type=int, default=QWEN2_VOCAB_SIZE)
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument(
        "--sampling-rule", default="inverse_cdf", choices=["inverse_cdf", "gumbel_max"]
    )
    parser.add_argument("--tag", default="h200")
    parser.add_argument("--out", default="benchmarks/results")
    return parser.parse_args()


def make_requests(args: argparse.Namespace) -> list[GenerationRequest]:
    generator = torch.Generator().manual_seed(99)
    requests = []
    for prompt_id in range(args.num_prompts):
        length = 8 + 5 * prompt_id % 17
        prompt = torch.randint(3, args.vocab_size, (length,), generator=generator).tolist()
        requests += [GenerationRequest(prompt_id, i, tuple(prompt)) for i in range(args.samples)]
    return requests


def tokens_of(sampler, requests, params, *, waves: list[list[int]]) -> dict:
    out = {}
    for wave in waves:
        for result in sampler.generate([requests[i] for i in wave], params, step=0).results:
            out[(result.prompt_id, result.sample_index)] = result.token_ids
    return out


def same(a: dict, b: dict) -> int:
    return sum(a[key] == b[key] for key in a)


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    requests = make_requests(args)
    n = len(requests)
    compositions = {
        "reversed": [list(range(n))[::-1]],
        "waves_of_3": [list(range(i, min(i + 3, n))) for i in range(0, n, 3)],
        "alone": [[i] for i in range(n)],
    }
    max_seq_len = max(len(r.prompt_token_ids) for r in requests) + args.new_tokens
    # on CUDA the compositions are checked with graphs (eager is compared once below)
    graphs = device.type == "cuda"

    def sampler(model, *, cuda_graphs: bool) -> KVCacheSampler:
        config = SamplerConfig(
            max_batch_size=n,
            max_seq_len=max_seq_len,
            cuda_graphs=cuda_graphs,
            sampling_rule=args.sampling_rule,
        )
        return KVCacheSampler(model, config)

    rows = []
    for dtype in args.dtypes:
        model = build_model(
            ModelSpec(preset=args.preset, dtype=dtype, vocab_size=args.vocab_size), device=device
        )
        for temperature in (0.0, 1.0):
            params = SamplingParams(temperature=temperature, max_new_tokens=args.new_tokens)
            main_sampler = sampler(model, cuda_graphs=graphs)
            full = tokens_of(main_sampler, requests, params, waves=[list(range(n))])
            row = {"dtype": dtype, "temperature": temperature, "cuda_graphs": graphs, "samples": n}
            for name, waves in compositions.items():
                row[f"same_as_full_batch_{name}"] = same(
                    full, tokens_of(main_sampler, requests, params, waves=waves)
                )
            if graphs:
                eager = sampler(model, cuda_graphs=False)
                row["same_as_eager"] = same(
                    full, tokens_of(eager, requests, params, waves=[list(range(n))])
                )
            print(row, flush=True)
            rows.append(row)
        del model
    record = {"config": vars(args), "device": str(device), "torch": torch.__version__, "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"sampler_consistency_{args.tag}.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / f"sampler_consistency_{args.tag}.md").write_text(markdown(record))


def markdown(record: dict) -> str:
    cfg = record["config"]
    lines = [
        f"# Sampler consistency on {record['device']} ({cfg['preset']}, random init)",
        "",
        f"{cfg['num_prompts']} prompts x {cfg['samples']} samples, {cfg['new_tokens']} new tokens. "
        "Each cell: samples (of all) whose tokens equal those of the same sample generated in "
        "the full batch with the same mode.",
        "",
        "| dtype | temperature | CUDA graphs | reversed | waves of 3 | alone | graphs = eager |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in record["rows"]:
        eager = f"{r['same_as_eager']}/{r['samples']}" if "same_as_eager" in r else "-"
        lines.append(
            f"| {r['dtype']} | {r['temperature']} | {r['cuda_graphs']} | "
            f"{r['same_as_full_batch_reversed']}/{r['samples']} | "
            f"{r['same_as_full_batch_waves_of_3']}/{r['samples']} | "
            f"{r['same_as_full_batch_alone']}/{r['samples']} | {eager} |"
        )
    lines += [
        "",
        f"Command: `python3 benchmarks/sampler_consistency.py --device {record['device']}`",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
