"""Trainers that share one GPU: the gradient's all-reduce and the slices' gather, ipc vs host.

Two or three ranks on cuda:0 (plain processes in a gloo group, executor/testing/exchange_ranks.py)
reduce an fp32 vector of a model's size: on the ipc path (each rank maps the others' staging
buffers through CUDA IPC and sums them on the device; gloo carries only handles and barriers) and
on the host path (device -> host copy, gloo's sum on the CPU, host -> device copy). Figures: the
median over ranks of each rank's median call, seconds; the ipc path's speed-up over the host path.
Sizes: qwen2-0.5b's parameters (494,032,768) and a quarter of them.

    python3 benchmarks/bench_trainer_collectives.py     # needs CUDA: trainer_collectives.json/.md
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = {"qwen2-0.5b": 494_032_768, "quarter": 123_508_192}


def measure(numel: int, num_ranks: int, repeats: int) -> dict[str, float]:
    from dynaresize.executor.testing.exchange_ranks import ExchangeJob, run_exchange

    ranks = run_exchange(
        ExchangeJob(numel=numel, repeats=repeats, host_repeats=1, keep_values=False, timeout_s=540),
        num_ranks,
    )
    out: dict[str, float] = {}
    for key in ranks[0].seconds:
        out[f"{key}_s"] = statistics.median(statistics.median(r.seconds[key]) for r in ranks)
    out["all_reduce_speedup"] = out["host_all_reduce_s"] / out["ipc_all_reduce_s"]
    out["all_gather_speedup"] = out["host_all_gather_s"] / out["ipc_all_gather_s"]
    out["path"] = ranks[0].path  # type: ignore[assignment]
    return out


def markdown(result: dict, command: str) -> str:
    lines = [
        "# Trainers sharing one GPU: collectives on the ipc and the host path",
        "",
        f"`{command}` on {result['device']}. Seconds per call (median over ranks of each "
        "rank's median); the host path's single timed call.",
        "",
        "| size | elements | ranks | path | ipc all-reduce | host all-reduce | speed-up "
        "| ipc all-gather | host all-gather | speed-up |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for case in result["cases"]:
        lines.append(
            f"| {case['size']} | {case['numel']:,} | {case['ranks']} | {case['path']} "
            f"| {case['ipc_all_reduce_s']:.4f} | {case['host_all_reduce_s']:.3f} "
            f"| {case['all_reduce_speedup']:.0f}x | {case['ipc_all_gather_s']:.4f} "
            f"| {case['host_all_gather_s']:.3f} | {case['all_gather_speedup']:.0f}x |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("error: bench_trainer_collectives needs a CUDA device", file=sys.stderr)
        raise SystemExit(2)
    cases = []
    for size in args.sizes:
        for num_ranks in args.ranks:
            figures = measure(SIZES[size], num_ranks, args.repeats)
            case = {"size": size, "numel": SIZES[size], "ranks": num_ranks, **figures}
            print(json.dumps(case), flush=True)
            cases.append(case)
    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cases": cases,
    }
    command = "python3 benchmarks/bench_trainer_collectives.py " + " ".join(sys.argv[1:])
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "trainer_collectives.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out_dir / "trainer_collectives.md").write_text(markdown(result, command.strip()))
    print(markdown(result, command.strip()))


if __name__ == "__main__":
    main()
