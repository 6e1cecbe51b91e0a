"""Device memory one rollout engine holds: what `rollout_engines: resident` costs every trainer.

A resident engine (KV cache, rotary tables, captured decode graphs and their private pool) stays
on a worker while it trains. This measures it for the configurations of the GPU results: the
calibration runs' models and presets (benchmarks/live_gpu_calibration_runs.py) and the resize
benchmark's models (benchmarks/bench_resize.py). Each engine is built in this process on the
first CUDA device, exactly as a worker builds it, and the growth of the caching allocator's
reserved and allocated memory is reported, next to the model's own weights for scale.

    python3 benchmarks/bench_engine_memory.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

GIB = 1 << 30


def calibration_live_config(model: str, preset: str) -> dict:
    from live_gpu_calibration_runs import gpu_config

    return gpu_config(preset, model=model, num_steps=16)["live"]


def resize_bench_live_config(model: str) -> dict:
    from bench_resize import START, model_spec

    return {
        "model": model_spec(model, device="cuda"),
        "device": "cuda",
        "num_workers": 3,
        "num_gpus": 1,
        "initial_allocation": START,
        "candidate_allocations": "2:1,1:2",
    }


CASES = {
    "medium:long_tail": lambda: calibration_live_config("medium", "long_tail"),
    "medium:wide_tail": lambda: calibration_live_config("medium", "wide_tail"),
    "small:short_tail": lambda: calibration_live_config("small", "short_tail"),
    "qwen2-0.5b (bench_resize)": lambda: resize_bench_live_config("qwen2-0.5b"),
    "qwen2-1.5b (bench_resize)": lambda: resize_bench_live_config("qwen2-1.5b"),
    # a batch and answer length of a production run, for scale
    "qwen2-1.5b, 256 samples, 2,000 tokens": lambda: {
        **resize_bench_live_config("qwen2-1.5b"),
        "prompts_per_step": 32,
        "samples_per_prompt": 8,
        "max_response_tokens": 2000,
    },
}


def measure(live: dict) -> dict:
    import torch

    from dynaresize.executor.config import LiveConfig
    from dynaresize.executor.worker.actor import LiveWorker
    from dynaresize.executor.worker.rollout import sampler_config

    config = LiveConfig.model_validate({**live, "rollout_engines": "resident"})
    worker = LiveWorker(worker_id=0, config_json=config.model_dump_json())
    worker.build_model()
    torch.cuda.synchronize()
    before_reserved, before_allocated = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
    weights_bytes = sum(p.numel() * p.element_size() for p in worker.model.parameters())
    worker.prebuild_rollout_engine()  # a worker without a role builds and keeps one engine
    torch.cuda.synchronize()
    sampler = sampler_config(config)
    result = {
        "kv_rows": sampler.max_batch_size,
        "max_seq_len": sampler.max_seq_len,
        "weights_gib": weights_bytes / GIB,
        "engine_reserved_gib": (torch.cuda.memory_reserved() - before_reserved) / GIB,
        "engine_allocated_gib": (torch.cuda.memory_allocated() - before_allocated) / GIB,
    }
    del worker
    gc.collect()
    torch.cuda.empty_cache()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="Write the figures as JSON too.")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("error: needs a CUDA device (engines capture CUDA graphs)", file=sys.stderr)
        return 2
    rows = {}
    print("| configuration | KV rows x length | weights GiB | engine reserved GiB | alloc. GiB |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, live in CASES.items():
        row = measure(live())
        rows[name] = row
        print(
            f"| {name} | {row['kv_rows']} x {row['max_seq_len']} | {row['weights_gib']:.3f} | "
            f"{row['engine_reserved_gib']:.3f} | {row['engine_allocated_gib']:.3f} |",
            flush=True,
        )
    if args.out is not None:
        args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
