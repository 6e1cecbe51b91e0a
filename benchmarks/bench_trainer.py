"""The project's trainer step alone, one process, one device: tokens/s, MFU, peak memory.

Runs `TrainerRole.train` (one rank: no collective) on batches of synthetic samples for Qwen2
shapes built from configs (bf16 parameters, Qwen2's 151,936-token vocabulary, random weights):
the 0.5B and 1.5B shapes with 64-token prompts and responses of 256 and 1,024 tokens (about 16k
tokens per step), and the live H200 run's batch (0.63B: the 0.5B shape with untied embeddings,
128 samples of a 6-token prompt and a 128-token response, 17,152 tokens). Each case: one warm-up
step, then `--steps` timed steps; the median is reported.

MFU = (6 x matmul parameters + 6 x layers x hidden x sequence length) x tokens / step_s / peak,
peak = 989.4e12 FLOP/s (H200 SXM dense bf16, no sparsity). Matmul parameters are all parameters
but an untied input embedding (a lookup, no FLOPs). The output head runs on response tokens only,
so counting it on prompt tokens too slightly overstates the work done (by under 6% here).

host_bytes_per_step: bytes of device-to-host copies during one step of the update path
(`TrainerRole.step`), from the CUDA profiler's memcpy records; the step's report then reads 16
bytes (loss, gap and gradient-norm figures) once, at its end.

    python3 benchmarks/bench_trainer.py --device cuda          # H200: trainer_h200.json/.md
    python benchmarks/bench_trainer.py --device cpu --steps 1  # CPU smoke run (tiny shape)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
H200_DENSE_BF16_FLOPS = 989.4e12
PROMPT_TOKENS = 64
BATCH_TOKENS = 16_384


def shapes() -> dict[str, dict[str, Any]]:
    from dynaresize.executor.rl.model_spec import QWEN2_VOCAB_SIZE, preset_architecture

    qwen = {"vocab_size": QWEN2_VOCAB_SIZE, "max_position_embeddings": 4096}
    return {
        "qwen2-0.5b": {**preset_architecture("qwen2-0.5b"), **qwen},
        "qwen2-1.5b": {**preset_architecture("qwen2-1.5b"), **qwen},
        "0.63b": {**preset_architecture("qwen2-0.5b"), **qwen, "tie_word_embeddings": False},
        "tiny": preset_architecture("tiny"),
    }


def cases(device: str) -> list[dict[str, Any]]:
    """(shape, prompt, response, rows) of each case; the CPU smoke run takes the tiny shape."""
    if device == "cpu":
        return [{"shape": "tiny", "prompt": 8, "response": 32, "rows": 16, "key": "tiny"}]
    out = []
    for shape in ("qwen2-0.5b", "qwen2-1.5b"):
        for response in (256, 1024):
            rows = BATCH_TOKENS // (PROMPT_TOKENS + response)
            out.append(
                {"shape": shape, "prompt": PROMPT_TOKENS, "response": response, "rows": rows}
            )
    out.append({"shape": "0.63b", "prompt": 6, "response": 128, "rows": 128, "key": "live"})
    return out


def synthetic_samples(rows: int, prompt: int, response: int, vocab: int, seed: int = 0):
    import random

    from dynaresize.executor.batch import RolloutSample

    rng = random.Random(seed)
    return [
        RolloutSample(
            batch_id=0,
            prompt_id=i // 4,
            sample_index=i % 4,
            prompt_token_ids=tuple(rng.randrange(3, vocab) for _ in range(prompt)),
            response_token_ids=tuple(rng.randrange(3, vocab) for _ in range(response)),
            reward=0.0,
            hit_length_cap=True,
            finish_s=0.0,
            generated_by_device=0,
            weights_version=0,
            advantage=rng.gauss(0.0, 1.0),
        )
        for i in range(rows)
    ]


def matmul_parameters(model) -> int:
    total = sum(p.numel() for p in model.parameters())
    if getattr(model.config, "tie_word_embeddings", True):
        return total
    return total - model.get_input_embeddings().weight.numel()


def device_to_host_bytes(run) -> int:
    """Bytes of device-to-host memcpy records while `run()` executes (CUDA profiler trace)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    total = 0
    for event in events:
        name = str(event.get("name", "")).lower()
        if event.get("cat") == "gpu_memcpy" and ("dtoh" in name or "device -> p" in name):
            total += int(event.get("args", {}).get("bytes", 0))
    return total


def run_case(case: dict[str, Any], *, device: str, steps: int, checkpointing: bool) -> dict:
    import torch

    from dynaresize.executor.rl.model import build_model, count_parameters
    from dynaresize.executor.rl.model_spec import ModelSpec
    from dynaresize.executor.rl.settings import ObjectiveSettings, OptimizerSettings
    from dynaresize.executor.testing.trainer_ranks import single_trainer

    dev = (
        torch.device("cuda", torch.cuda.current_device())
        if device == "cuda"
        else torch.device(device)
    )
    dtype = "bfloat16" if device == "cuda" else "float32"
    spec = ModelSpec.model_validate({"config": shapes()[case["shape"]], "dtype": dtype})
    built = time.perf_counter()
    model = build_model(spec, device=dev).requires_grad_(True)
    build_s = time.perf_counter() - built
    trainer = single_trainer(
        model,
        dev,
        settings=OptimizerSettings(lr=1e-6),
        objective=ObjectiveSettings(),
        micro_batch_samples=16,
        activation_checkpointing=checkpointing,
    )
    samples = synthetic_samples(
        case["rows"], case["prompt"], case["response"], model.config.vocab_size
    )
    response_tokens = case["rows"] * case["response"]
    tokens = case["rows"] * (case["prompt"] + case["response"])
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    trainer.train(samples, num_batch_tokens=response_tokens)  # warm-up
    times = []
    for _ in range(steps):
        times.append(trainer.train(samples, num_batch_tokens=response_tokens).train_s)
    step_s = statistics.median(times)
    config = model.config
    seq = case["prompt"] + case["response"]
    flops_per_token = 6 * matmul_parameters(model) + 6 * (
        config.num_hidden_layers * config.hidden_size * seq
    )
    out = {
        **{k: v for k, v in case.items() if k != "key"},
        "parameters": count_parameters(model),
        "tokens": tokens,
        "build_s": build_s,
        "step_s": step_s,
        "step_s_all": times,
        "tokens_per_s": tokens / step_s,
        "mfu": flops_per_token * tokens / step_s / H200_DENSE_BF16_FLOPS,
        "micro_batches": len(trainer.micro_batch_plan(samples).batches),
        "activation_checkpointing": checkpointing,
    }
    if dev.type == "cuda":
        out["peak_memory_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30

        def one_step() -> None:
            trainer.step(samples, num_batch_tokens=response_tokens)

        out["host_bytes_per_step"] = device_to_host_bytes(one_step)
    return out


def summary(runs: list[dict], device_name: str) -> dict:
    result: dict[str, Any] = {
        "device": device_name,
        "platform": platform.platform(),
        "peak_flops": H200_DENSE_BF16_FLOPS,
        "peak_flops_source": "H200 SXM dense bf16 (no sparsity), 989.4 TFLOP/s",
        "mfu": {},
        "tokens_per_s": {},
        "runs": runs,
    }
    for run in runs:
        if "error" in run:
            continue
        if run["shape"] == "0.63b":
            result["step_s_0_63b_17k_tokens_one_trainer"] = run["step_s"]
            continue
        for key in ("mfu", "tokens_per_s"):
            result[key].setdefault(run["shape"], {})[str(run["response"])] = run[key]
    measured = [r["host_bytes_per_step"] for r in runs if "host_bytes_per_step" in r]
    if measured:
        result["host_bytes_per_step"] = max(measured)
    return result


def markdown(result: dict, command: str) -> str:
    lines = [
        f"# Trainer step alone on {result['device']}",
        "",
        f"One process, one trainer (no collective). MFU over {result['peak_flops_source']}. "
        f"Command: `{command}`.",
        "",
        "| shape | prompt | response | rows | tokens | micro-batches | step_s | tokens/s | MFU "
        "| peak GiB | host bytes/step |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result["runs"]:
        if "error" in r:
            lines.append(f"| {r['shape']} | | {r.get('response', '')} | | | | failed | | | | |")
            continue
        lines.append(
            f"| {r['shape']} | {r['prompt']} | {r['response']} | {r['rows']} | {r['tokens']} "
            f"| {r['micro_batches']} | {r['step_s']:.3f} | {r['tokens_per_s']:,.0f} "
            f"| {r['mfu']:.3f} | {r.get('peak_memory_gib', float('nan')):.1f} "
            f"| {r.get('host_bytes_per_step', '')} |"
        )
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--steps", type=int, default=3, help="Timed steps per case.")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument("--tag", default=None, help="File name tag (default: h200 or cpu).")
    parser.add_argument(
        "--activation-checkpointing", action="store_true", help="Recompute decoder layers."
    )
    parser.add_argument(
        "--cases",
        default=None,
        help="Only these cases, comma-separated SHAPE:RESPONSE or SHAPE (e.g. "
        "qwen2-1.5b:1024,0.63b); default: all.",
    )
    args = parser.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_trainer: --device cuda but CUDA is absent", file=sys.stderr)
        raise SystemExit(2)
    tag = args.tag or ("h200" if args.device == "cuda" else "cpu")
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    command = "python3 benchmarks/bench_trainer.py " + " ".join(sys.argv[1:])
    args.out_dir.mkdir(parents=True, exist_ok=True)
    runs: list[dict] = []
    chosen = cases(args.device)
    if args.cases:
        wanted = set(args.cases.split(","))
        chosen = [c for c in chosen if {c["shape"], f"{c['shape']}:{c['response']}"} & wanted]
        if not chosen:
            print(f"bench_trainer: --cases {args.cases!r} names no case", file=sys.stderr)
            raise SystemExit(2)
    for case in chosen:
        try:
            run = run_case(
                case,
                device=args.device,
                steps=args.steps,
                checkpointing=args.activation_checkpointing,
            )
        except Exception:  # one failed case must not lose the others
            run = {**case, "error": traceback.format_exc()[-2000:]}
        if args.device == "cuda":
            torch.cuda.empty_cache()
        runs.append(run)
        print(json.dumps({k: v for k, v in run.items() if k != "step_s_all"}), flush=True)
        result = summary(runs, name)
        (args.out_dir / f"trainer_{tag}.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out_dir / f"trainer_{tag}.md").write_text(markdown(result, command))


if __name__ == "__main__":
    main()
