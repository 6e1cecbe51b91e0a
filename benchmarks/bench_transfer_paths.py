"""Seconds per GB of each path a resize's slices take, measured between two processes in one run.

    python benchmarks/bench_transfer_paths.py                      # CPU: shm and network
    python benchmarks/bench_transfer_paths.py --device cuda        # + device with two GPUs

- shm: the receiver's bounded shared-memory pool (executor/staging/transfer.py), what a pair of
  workers on one node uses; on CUDA through pinned host buffers;
- network: the gloo wire through bounded host buffers (executor/staging/network.py), what a pair
  on two nodes uses on CPU; here both processes share the machine, so the "network" is the
  loopback interface (TCP through the kernel), not a NIC;
- device: the NCCL wire GPU to GPU (executor/staging/device.py), what two GPUs of a node use with
  `staging.path: auto` or `device`; needs two GPUs (NCCL cannot join two ranks on one).

Each transfer moves one fp32 slice of the given size from process 0 to process 1, after a
barrier, timed on the receiver from its first request to the last byte in place (as the live
records time it); the paths take turns, and the median of `--repeats` is reported per size. Writes
benchmarks/results/transfer_paths_<device>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
MIB = 1 << 20


def _measure(rank: int, init_file: str, args: argparse.Namespace, queue) -> None:
    import torch
    import torch.distributed as dist

    from dynaresize.executor.staging import StagingConfig, StagingPool, StagingSender
    from dynaresize.executor.staging.device import nccl_wire
    from dynaresize.executor.staging.network import PointToPoint, Wire

    torch.set_num_threads(1)
    cuda = args.device == "cuda"
    device = torch.device("cuda", rank if torch.cuda.device_count() > 1 else 0) if cuda else None
    device = device or torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    config = StagingConfig(chunk_bytes=args.chunk_mib * MIB, num_buffers=2, peer_timeout_s=600)
    control = dist.new_group([0, 1], backend="gloo")

    # shm: process 1 owns the pool, process 0 maps it by name
    pool = StagingPool(config, device=device) if rank == 1 else None
    name = torch.zeros(256, dtype=torch.uint8)
    if pool is not None:
        raw = pool.name.encode()
        name[: len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
    dist.broadcast(name, src=1)
    pool_name = bytes(name[name > 0].tolist()).decode()
    sender = StagingSender(config, device=device) if rank == 0 else None
    if sender is not None:
        sender.attach(pool_name)

    wires = {
        "network": PointToPoint(config, control=control, data=Wire(control, torch.device("cpu")))
    }
    if cuda and torch.cuda.device_count() > 1:
        wires["device"] = PointToPoint(
            config, control=control, data=nccl_wire(world_size=2, device=device, timeout_s=600)
        )

    results: dict[str, dict[int, list[float]]] = {}
    transfer_id = 0
    for size_mib in args.sizes_mib:
        tensor = {"master": torch.ones(size_mib * MIB // 4, device=device)}
        for _ in range(args.repeats):
            for path in ("shm", *wires):  # alternated: a change in load hits every path alike
                transfer_id += 1
                dist.barrier(group=control)
                if rank == 0:
                    if path == "shm":
                        assert sender is not None
                        sender.send(pool_name, tensor, transfer_id=transfer_id, sender_id=0)
                    else:
                        wires[path].send(1, tensor, transfer_id=transfer_id)
                    continue
                into = {"master": torch.empty_like(tensor["master"])}
                if path == "shm":
                    assert pool is not None
                    stats = pool.receive_into(into, transfer_id=transfer_id, sender_id=0)
                else:
                    stats = wires[path].receive_into(0, into, transfer_id=transfer_id)
                results.setdefault(path, {}).setdefault(size_mib, []).append(stats.seconds)
    if sender is not None:
        sender.close()
    if pool is not None:
        pool.close()
    if rank == 1:
        queue.put(results)
    dist.barrier(group=control)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--sizes-mib", type=lambda s: [int(x) for x in s.split(",")], default=[16, 64, 256]
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk-mib", type=int, default=16)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    load_before = os.getloadavg()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as folder:
        procs = [
            ctx.Process(target=_measure, args=(r, f"{folder}/init", args, queue)) for r in range(2)
        ]
        for p in procs:
            p.start()
        results = queue.get(timeout=3600)
        for p in procs:
            p.join(timeout=120)
    rows = []
    for path, by_size in results.items():
        for size_mib, seconds in sorted(by_size.items()):
            median = statistics.median(seconds)
            gigabytes = size_mib * MIB / 1e9
            rows.append(
                {
                    "path": path,
                    "size_mib": size_mib,
                    "median_s": median,
                    "seconds_per_gb": median / gigabytes,
                    "gb_per_s": gigabytes / median,
                    "runs_s": seconds,
                }
            )
    report = {
        "command": " ".join(["python", "benchmarks/bench_transfer_paths.py", *sys.argv[1:]]),
        "device": args.device,
        "chunk_mib": args.chunk_mib,
        "machine": platform.node(),
        "elapsed_s": time.perf_counter() - started,
        "cpus": os.cpu_count(),
        "load_average_1m": {"before": load_before[0], "after": os.getloadavg()[0]},
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"transfer_paths_{args.device}.json").write_text(json.dumps(report, indent=2))
    lines = [
        f"# Transfer paths ({args.device})",
        "",
        f"`{report['command']}`",
        "",
        f"{os.cpu_count()} CPUs, 1-minute load average {load_before[0]:.1f} before and "
        f"{os.getloadavg()[0]:.1f} after: a machine shared with other jobs, so compare the paths "
        "within one run (they take turns), not across runs.",
        "",
        "| path | MiB | median s | s/GB | GB/s |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['path']} | {r['size_mib']} | {r['median_s']:.4f} | {r['seconds_per_gb']:.3f} "
        f"| {r['gb_per_s']:.2f} |"
        for r in rows
    ]
    (RESULTS / f"transfer_paths_{args.device}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
