"""vLLM as a rollout engine on one CUDA device: throughput, weight loads, sleep, destroy, batch
invariance, for one Qwen2 shape per call (built from its config in bf16, never downloaded).

Every vLLM engine runs in an engine process (`EngineProcess`), as in a live run, and receives
weights from this process's device buffer by CUDA IPC. Measured, for `--shape`:

- `tokens_per_s`: vLLM (CUDA graphs), the own sampler and HF `generate`, on the same batch
  (`--prompts` x `--samples` samples, `--prompt-tokens`-token prompts, exactly `--new-tokens`
  new tokens each);
- `load_weights_s` (median of 5 loads of the whole model from a device buffer, engine side
  included) and `weights_gib`;
- `sleep_release_s` and `wake_s` (level 2: the wake includes loading the last weights again);
- `destroy_rebuild_cycles`: release (destroy: the engine process ends) and rebuild (a spare
  process with its imports done builds the engine), `--cycles` times, each checked to generate
  the same tokens; `device_free_gib_before_start` and `device_free_gib_after_destroy` (the
  smallest free figure after any destroy);
- `same_tokens_fraction` (32 requests alone vs among 256) without, and with batch-invariant
  kernels (`batch_invariant_same_tokens_fraction`, `batch_invariant_tokens_per_s`).

    python benchmarks/bench_vllm_h200.py --shape 0.5b
    python benchmarks/bench_vllm_h200.py --shape 1.5b

Each call updates its shape's entry of benchmarks/results/vllm_h200.json (or --out) and rewrites
vllm_h200.md from the whole file; `--merge FILE...` adds the entries of result files written
elsewhere instead of measuring.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from dynaresize.executor.engines.build import (
    EngineShape,
    VLLMEngineFactory,
    make_local_engine,
    save_model_folder,
)
from dynaresize.executor.engines.config import EngineKind
from dynaresize.executor.engines.interface import GenerationRequest, RolloutEngine, SamplingParams
from dynaresize.executor.engines.process import EngineProcess
from dynaresize.executor.engines.vllm_engine import ReleaseMode, VLLMEngineConfig
from dynaresize.executor.rl.model import ModelSpec, build_model, flatten_parameters
from dynaresize.executor.rl.model_spec import QWEN2_VOCAB_SIZE, preset_architecture

RESULTS = Path(__file__).resolve().parent / "results"
GIB = 1 << 30
SHAPES = {"0.5b": "qwen2-0.5b", "1.5b": "qwen2-1.5b"}


def free_gib() -> float:
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0] / GIB


def batch(args: argparse.Namespace) -> list[GenerationRequest]:
    generator = torch.Generator().manual_seed(5)
    prompts = torch.randint(3, 30_000, (args.prompts, args.prompt_tokens), generator=generator)
    return [
        GenerationRequest(p, s, tuple(prompts[p].tolist()))
        for p in range(args.prompts)
        for s in range(args.samples)
    ]


def tokens_per_s(engine: RolloutEngine, requests, params: SamplingParams) -> float:
    engine.generate(requests[:8], params, step=0)  # warm
    out = engine.generate(requests, params, step=1)
    return out.num_generated_tokens / out.wall_s


def same_fraction(engine: RolloutEngine, requests, params: SamplingParams) -> float:
    """Share of the first 32 requests whose tokens alone equal those inside the whole batch."""
    alone = engine.generate(requests[:32], params, step=2).results
    among = engine.generate(requests, params, step=2).results[:32]
    return sum(a.token_ids == b.token_ids for a, b in zip(alone, among, strict=True)) / 32


def vllm_process(
    folder: Path, args, *, release: ReleaseMode, eager: bool, **extra
) -> EngineProcess:
    config = VLLMEngineConfig(
        model_path=folder,
        max_model_len=args.prompt_tokens + args.new_tokens,
        max_num_seqs=args.prompts * args.samples,
        dtype="bfloat16",
        kv_cache_memory_gb=args.kv_gib,
        enforce_eager=eager,
        release=release,
        **extra,
    )
    return EngineProcess(
        VLLMEngineFactory(config),
        name=f"bench-{release.value}",
        end_on_release=release is ReleaseMode.DESTROY,
        start_timeout_s=600,
        call_timeout_s=600,
    )


PARTS = ("own_and_hf", "vllm_sleep", "vllm_destroy", "vllm_batch_invariant")


def measure(args: argparse.Namespace, save, earlier: dict[str, Any]) -> dict[str, Any]:
    """The figures of the parts asked for, over `earlier` (the shape's figures from a run that
    measured other parts); `save(result)` after each part, so that a run stopped by a time limit
    keeps what it measured."""
    config = {**preset_architecture(SHAPES[args.shape]), "vocab_size": QWEN2_VOCAB_SIZE}
    model = build_model(ModelSpec(config=config, dtype="bfloat16"), device="cuda")
    flat = flatten_parameters(model).detach().clone()
    other = flat + 0.01 * torch.randn_like(flat)
    folder = Path(tempfile.mkdtemp(prefix=f"vllm_h200_{args.shape}_"))
    save_model_folder(model, folder)
    requests = batch(args)
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, seed=3)
    shape = EngineShape(
        max_batch_size=len(requests),
        max_seq_len=args.prompt_tokens + args.new_tokens,
        pad_token_id=0,
    )
    result: dict[str, Any] = {
        **earlier,
        "shape": args.shape,
        "params_b": flat.numel() / 1e9,
        "weights_gib": flat.numel() * flat.element_size() / GIB,
        "batch": {
            "samples": len(requests),
            "prompt_tokens": args.prompt_tokens,
            "new_tokens": args.new_tokens,
        },
        "tokens_per_s": dict(earlier.get("tokens_per_s", {})),
    }
    for name in args.parts:  # a part measured again replaces its failure, if any
        result.get("errors", {}).pop(name, None)

    def step(name: str, fn) -> None:
        begin = time.perf_counter()
        try:
            fn()
        except Exception as error:  # one failed part must not lose the others' figures
            result.setdefault("errors", {})[name] = f"{type(error).__name__}: {error}"
        result.setdefault("part_wall_s", {})[name] = time.perf_counter() - begin
        result.setdefault("measured_on", {})[name] = {
            "device": torch.cuda.get_device_name(),
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
        }
        print(f"[{args.shape}] {name}: {time.perf_counter() - begin:.1f} s", flush=True)
        save(result)

    def local() -> None:
        for kind in (EngineKind.OWN, EngineKind.HF):
            engine = make_local_engine(kind, model, shape)
            result["tokens_per_s"][kind.value] = tokens_per_s(engine, requests, params)
            del engine
            torch.cuda.empty_cache()

    def sleeping() -> None:
        with vllm_process(folder, args, release=ReleaseMode.SLEEP, eager=False) as process:
            result["vllm_start_s"] = process.start_s
            result["tokens_per_s"]["vllm"] = tokens_per_s(process, requests, params)
            result["same_tokens_fraction"] = same_fraction(process, requests, params)
            loads = []
            for version in (other, flat) * 3:
                process.load_weights(version)
                assert process.last_load is not None
                loads.append(process.last_load.total_s)
            result["load_weights_s"] = statistics.median(loads[1:])  # the first maps the buffer
            result["load_weights_engine_s"] = process.last_load.engine_s
            awake = free_gib()
            result["sleep_release_s"] = process.release()
            result["sleep_freed_gib"] = free_gib() - awake
            result["wake_s"] = process.rebuild()

    def destroyed() -> None:
        result["device_free_gib_before_start"] = free_gib()
        with vllm_process(folder, args, release=ReleaseMode.DESTROY, eager=True) as process:
            process.load_weights(flat)
            first = process.generate(requests[:32], params, step=4).results
            cycles, after, rebuild_s = 0, [], []
            for _ in range(args.cycles):
                process.release()
                after.append(free_gib())
                rebuild_s.append(process.rebuild())
                process.load_weights(flat)  # a worker loads its current weights after a start
                again = process.generate(requests[:32], params, step=4).results
                if [r.token_ids for r in again] != [r.token_ids for r in first]:
                    raise RuntimeError(f"cycle {cycles + 1}: tokens differ after the rebuild")
                cycles += 1
        result["destroy_rebuild_cycles"] = cycles
        result["device_free_gib_after_destroy"] = min(after)
        result["rebuild_s"] = rebuild_s

    def invariant() -> None:
        with vllm_process(
            folder, args, release=ReleaseMode.SLEEP, eager=False, batch_invariant=True
        ) as process:
            process.load_weights(flat)
            result["batch_invariant_tokens_per_s"] = tokens_per_s(process, requests, params)
            result["batch_invariant_same_tokens_fraction"] = same_fraction(
                process, requests, params
            )

    parts = {
        "own_and_hf": local,
        "vllm_sleep": sleeping,
        "vllm_destroy": destroyed,
        "vllm_batch_invariant": invariant,
    }
    try:
        for name in args.parts:
            step(name, parts[name])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return result


def markdown(results: dict[str, dict[str, Any]]) -> str:
    rows = [
        ("tokens/s vLLM", lambda r: r["tokens_per_s"].get("vllm")),
        ("tokens/s own sampler", lambda r: r["tokens_per_s"].get("own")),
        ("tokens/s HF generate", lambda r: r["tokens_per_s"].get("hf")),
        ("weights GiB", lambda r: r.get("weights_gib")),
        ("load_weights s (device buffer, median)", lambda r: r.get("load_weights_s")),
        ("sleep release s (level 2)", lambda r: r.get("sleep_release_s")),
        ("wake s", lambda r: r.get("wake_s")),
        ("destroy -> rebuild cycles", lambda r: r.get("destroy_rebuild_cycles")),
        ("device free GiB before start", lambda r: r.get("device_free_gib_before_start")),
        ("device free GiB after destroy (min)", lambda r: r.get("device_free_gib_after_destroy")),
        ("same tokens, 32 alone vs in 256", lambda r: r.get("same_tokens_fraction")),
        ("batch-invariant tokens/s", lambda r: r.get("batch_invariant_tokens_per_s")),
        ("batch-invariant same tokens", lambda r: r.get("batch_invariant_same_tokens_fraction")),
    ]
    shapes = sorted(results)
    lines = [
        "# vLLM rollout engine on one GPU",
        "",
        "`python benchmarks/bench_vllm_h200.py --shape S` (Qwen2 shapes from their configs, "
        "bf16; engines in engine processes, weights from a device buffer by CUDA IPC). Each part's "
        "device and date are listed under the table.",
        "",
        "| figure | " + " | ".join(shapes) + " |",
        "| --- |" + " ---: |" * len(shapes),
    ]
    for label, get in rows:
        cells = []
        for s in shapes:
            value = get(results[s])
            cells.append(
                "-"
                if value is None
                else f"{value:,.3f}"
                if isinstance(value, float)
                else str(value)
            )
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    for s in shapes:
        for name, where in sorted(results[s].get("measured_on", {}).items()):
            lines.append(f"- {s} `{name}`: {where['device']}, {where['date']}")
    for s in shapes:
        for name, error in results[s].get("errors", {}).items():
            lines.append(f"\n{s} {name} failed: {error}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES))
    parser.add_argument(
        "--merge", type=Path, nargs="+", help="Merge these result files into --out; no run."
    )
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--kv-gib", type=float, default=16.0)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "vllm_h200.json")
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        type=lambda text: [part for part in text.split(",") if part],
        help=f"Comma-separated parts to measure (default: all of {', '.join(PARTS)}); the "
        "shape's figures from earlier parts in --out are kept.",
    )
    args = parser.parse_args()
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown part(s) {', '.join(unknown)}; known: {', '.join(PARTS)}")
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    if args.merge:
        for path in args.merge:
            results.update(json.loads(path.read_text()))
    else:
        if args.shape is None or not torch.cuda.is_available():
            raise SystemExit("bench_vllm_h200 needs --shape and CUDA (or --merge)")
        measure(
            args,
            lambda result: write(args.out, {**results, args.shape: result}),
            results.get(args.shape, {}),
        )
        results = json.loads(args.out.read_text())
    print(write(args.out, results))


def write(out: Path, results: dict[str, dict[str, Any]]) -> str:
    """The JSON and its markdown table; returns the table."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    text = markdown(results)
    out.with_suffix(".md").write_text(text)
    return text


if __name__ == "__main__":
    main()
