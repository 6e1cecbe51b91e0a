"""Resize cost of every strategy and every single-mechanism ablation, measured in one run.

For each model, one set of live workers (Ray actors sharing the device(s); gloo between ranks)
runs the same sequence with each variant in turn: a warm-up step, a step, a resize from 2:1 to
1:2, two steps, a resize back to 2:1, two steps. Variants: `overlapped` with all mechanisms, with
none, with each one alone, and `stop_and_rebuild` last (it replaces the workers).

A resize's critical path is the measured gap between the end of the last step on the old split
and the start of the first on the new one; its background cost is the first step after it minus
the step after that (executor/observe/measure.py). Phases are reported as recorded by each
strategy. The physical floor is the bytes the overlapped strategy moves on the critical path over
the measured host-device bandwidth (the slower direction: staged bytes cross both, pipelined).

    python3 benchmarks/bench_resize.py --device cuda \\
        --models qwen2-0.5b,qwen2-1.5b --write-preset dynaresize/configs/costs_h200_resize.yaml

Writes benchmarks/results/resize_<device>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(Path(__file__).resolve().parent))  # resize_preset beside this file
SEQUENCE = ("1:2", "2:1")
START = "2:1"
STEPS_AFTER_RESIZE = 2

VARIANTS: dict[str, dict[str, bool] | None] = {
    "overlapped": {"reuse_communicators": True, "staging": True, "defer_optimizer": True},
    "overlapped:none": {"reuse_communicators": False, "staging": False, "defer_optimizer": False},
    "overlapped:reuse_only": {
        "reuse_communicators": True,
        "staging": False,
        "defer_optimizer": False,
    },
    "overlapped:staging_only": {
        "reuse_communicators": False,
        "staging": True,
        "defer_optimizer": False,
    },
    "overlapped:defer_only": {
        "reuse_communicators": False,
        "staging": False,
        "defer_optimizer": True,
    },
    "stop_and_rebuild": None,
}

MODEL_CONFIGS: dict[str, dict[str, Any]] = {
    # Shaped like Qwen2.5-3B; the RL core has presets up to 1.5B.
    "qwen2.5-3b": {
        "model_type": "qwen2",
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": True,
    },
}


def model_spec(name: str, *, device: str) -> dict[str, Any]:
    from dynaresize.executor.rl.model_spec import QWEN2_VOCAB_SIZE as QWEN2_VOCAB

    dtype = "bfloat16" if device == "cuda" else "float32"
    if name in MODEL_CONFIGS:
        return {"config": MODEL_CONFIGS[name], "dtype": dtype, "vocab_size": QWEN2_VOCAB}
    vocab = {"vocab_size": QWEN2_VOCAB} if name != "tiny" else {}
    return {"preset": name, "dtype": dtype, **vocab}


def host_device_bandwidth_gbps(device: str, *, nbytes: int = 1 << 30) -> dict[str, float]:
    """Best of five pinned copies each way (CUDA), or host memcpy (CPU), in GB/s."""
    import torch

    if device != "cuda":
        src, dst = torch.empty(nbytes, dtype=torch.uint8), torch.empty(nbytes, dtype=torch.uint8)
        src.fill_(1)
        best = min(_timed(lambda: dst.copy_(src)) for _ in range(5))
        return {"d2h_gbps": nbytes / best / 1e9, "h2d_gbps": nbytes / best / 1e9}
    device_buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host_buf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    copies = {
        "d2h_gbps": lambda: host_buf.copy_(device_buf),
        "h2d_gbps": lambda: device_buf.copy_(host_buf),
    }
    out = {}
    for key, copy in copies.items():
        times = []
        for _ in range(5):
            torch.cuda.synchronize()
            times.append(_timed(lambda copy=copy: (copy(), torch.cuda.synchronize())))
        out[key] = nbytes / min(times) / 1e9
    return out


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@dataclass(frozen=True)
class _Step:
    """A measured step, as `executor.strategies.measure.resize_costs` reads it."""

    start_s: float
    end_s: float
    resize_id: int | None


class Sequence:
    """Runs steps and resizes on one runtime and keeps what the measurement needs."""

    def __init__(self, runtime, *, batch_size: int, seq_len: int) -> None:
        self.rt = runtime
        self.batch_size, self.seq_len = batch_size, seq_len
        self.steps: list[_Step] = []
        self.resizes: list[dict[str, Any]] = []
        self._next_resize: int | None = None
        self._seed = 0

    def step(self, strategy) -> None:
        from dynaresize.executor.testing.harness import BenchWorker

        rt = self.rt
        strategy.before_train(rt)
        start = rt.clock()
        self._seed += 1
        rt.call(
            rt.all_ids,
            BenchWorker.bench_step,
            batch_size=self.batch_size,
            seq_len=self.seq_len,
            seed=self._seed,
        ).wait("a benchmark step")
        end = rt.clock()
        self.steps.append(_Step(start_s=start, end_s=end, resize_id=self._next_resize))
        self._next_resize = None
        strategy.after_step(rt)
        if hasattr(strategy, "pop_background_phases") and self.resizes:
            self.resizes[-1]["phases"] += [_phase(p) for p in strategy.pop_background_phases()]

    def resize(self, strategy, target: str) -> None:
        from dynaresize.executor.roles import RoleMap
        from dynaresize.policies.types import Allocation

        rt = self.rt
        before = rt.roles.allocation.label
        phases = strategy.resize(rt, target=RoleMap.for_allocation(Allocation.parse(target)))
        self._next_resize = len(self.resizes)
        self.resizes.append({"from": before, "to": target, "phases": [_phase(p) for p in phases]})


def _phase(p) -> dict[str, Any]:
    return {
        "phase": p.phase.value,
        "critical": p.critical,
        "duration_s": p.end_s - p.start_s,
        "bytes_moved": p.bytes_moved,
    }


def run_variant(runtime, name: str, switches, *, batch_size: int, seq_len: int) -> dict:
    from dynaresize.executor.config import OverlappedMechanisms
    from dynaresize.executor.observe.measure import resize_costs
    from dynaresize.executor.strategies.overlapped import OverlappedStrategy
    from dynaresize.executor.strategies.stop_and_rebuild import StopAndRebuildStrategy

    if switches is None:
        strategy = StopAndRebuildStrategy()  # restarts the runtime's actor class
    else:
        strategy = OverlappedStrategy(OverlappedMechanisms(**switches))
    seq = Sequence(runtime, batch_size=batch_size, seq_len=seq_len)
    seq.step(strategy)  # warm-up: first use of the pools, caches and kernels
    seq.step(strategy)
    for target in SEQUENCE:
        seq.resize(strategy, target)
        for _ in range(STEPS_AFTER_RESIZE):
            seq.step(strategy)
    if hasattr(strategy, "release"):
        strategy.release(runtime)

    costs = {c.resize_id: c for c in resize_costs(seq.steps)}
    for rid, resize in enumerate(seq.resizes):
        cost = costs[rid]
        resize["critical_s"] = cost.critical_s
        resize["background_s"] = cost.background_s
        resize["first_step_s"] = cost.first_step_s
        resize["next_step_s"] = cost.next_step_s
    steady = [s.end_s - s.start_s for s in seq.steps[1:2]]
    return {"variant": name, "switches": switches, "resizes": seq.resizes, "steady_step_s": steady}


def bench_model(model: str, args, on_variant) -> dict:
    import ray

    from dynaresize.executor.config import DeviceKind, LiveConfig, StagingSettings
    from dynaresize.executor.testing.harness import BenchWorker, start_runtime

    config = LiveConfig(
        model=model_spec(model, device=args.device),
        device=DeviceKind(args.device),
        num_workers=3,
        num_gpus=1,
        cpus_per_worker=1.0,
        torch_threads_per_worker=args.torch_threads,
        initial_allocation=START,
        candidate_allocations="2:1,1:2",
        staging=StagingSettings(chunk_mib=args.chunk_mib, num_buffers=args.num_buffers),
        rollout_engines=args.rollout_engines,
        checkpoint_every_steps=None,
        worker_timeout_s=900,
    )
    began = time.perf_counter()
    runtime, group, started = start_runtime(config, worker=BenchWorker)
    numel = runtime.call([0], BenchWorker.trainer_numel).wait("sizing")[0]
    setup_s = time.perf_counter() - began
    print(f"[{model}] {numel / 1e9:.3f} B parameters, setup {setup_s:.1f} s", flush=True)
    variants: list[dict] = []
    partial = {"model": model, "num_params": int(numel), "setup_s": setup_s, "variants": variants}
    try:
        for name in args.variants:
            t0 = time.perf_counter()
            result = run_variant(
                runtime, name, VARIANTS[name], batch_size=args.batch_size, seq_len=args.seq_len
            )
            variants.append(result)
            on_variant(partial)
            crit = ", ".join(f"{r['critical_s']:.2f}" for r in result["resizes"])
            print(
                f"[{model}] {name}: critical {crit} s ({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    finally:
        from ray.util.placement_group import remove_placement_group

        for actor in runtime.workers:
            ray.kill(actor, no_restart=True)
        remove_placement_group(group)
        if started:
            ray.shutdown()
    return partial


# --- summary -------------------------------------------------------------------------------


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def summarise(model_result: dict, bandwidth: dict[str, float]) -> dict:
    by_name = {v["variant"]: v for v in model_result["variants"]}
    base = by_name.get("stop_and_rebuild")
    base_crit = _mean(r["critical_s"] for r in base["resizes"]) if base else None
    base_bg = _mean(r["background_s"] for r in base["resizes"]) if base else None
    link_gbps = min(bandwidth["d2h_gbps"], bandwidth["h2d_gbps"])
    rows = []
    for name, v in by_name.items():
        crit = _mean(r["critical_s"] for r in v["resizes"])
        bg = _mean(r["background_s"] for r in v["resizes"])
        critical_bytes = _mean(
            sum(p["bytes_moved"] for p in r["phases"] if p["critical"]) for r in v["resizes"]
        )
        rollout_start = _mean(
            sum(p["duration_s"] for p in r["phases"] if p["phase"] == "rollout_reinit")
            for r in v["resizes"]
        )
        phases: dict[str, float] = {}
        for r in v["resizes"]:
            for p in r["phases"]:
                key = p["phase"] + ("" if p["critical"] else " (bg)")
                phases[key] = phases.get(key, 0.0) + p["duration_s"] / len(v["resizes"])
        floor = (critical_bytes or 0.0) / (link_gbps * 1e9)
        rows.append(
            {
                "variant": name,
                "critical_s": crit,
                "background_s": bg,
                "critical_ratio_to_stop_and_rebuild": crit / base_crit if base_crit else None,
                "total_ratio_to_stop_and_rebuild": (crit + max(bg or 0.0, 0.0))
                / (base_crit + max(base_bg or 0.0, 0.0))
                if base_crit
                else None,
                "critical_bytes": critical_bytes,
                "physical_floor_s": floor,
                "rollout_start_s": rollout_start,
                "critical_over_floor_plus_rollout_start": crit / (floor + (rollout_start or 0.0))
                if floor + (rollout_start or 0.0) > 0
                else None,
                "phases_s": phases,
            }
        )
    return {"model": model_result["model"], "num_params": model_result["num_params"], "rows": rows}


def markdown(summaries: list[dict], meta: dict) -> str:
    bw = meta["bandwidth"]
    link = (
        "Host-device bandwidth (pinned, 1 GiB, best of 5)"
        if meta["device"] == "cuda"
        else "Host memory copy bandwidth (1 GiB, best of 5; the floor's link on CPU)"
    )
    lines = [
        f"# Resize cost by strategy ({meta['device']})",
        "",
        f"{link}: D2H {bw['d2h_gbps']:.1f} GB/s, H2D {bw['h2d_gbps']:.1f} GB/s. "
        "Workers: 3 sharing the device, gloo between ranks; "
        f"sequence {START} -> {' -> '.join(SEQUENCE)}; values are means over the two resizes.",
        "Critical path: gap between the last step on the old split and the first on the new. "
        "Background: first step after the resize minus the one after it.",
        f"Command: `{meta['command']}`",
        "",
    ]
    for s in summaries:
        lines += [
            f"## {s['model']} ({s['num_params'] / 1e9:.2f} B parameters)",
            "",
            "| variant | critical s | background s | critical / S&R | (crit+bg) / S&R "
            "| floor s | rollout start s | critical / (floor + start) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in s["rows"]:
            lines.append(
                f"| {r['variant']} | {_f(r['critical_s'])} | {_f(r['background_s'])} "
                f"| {_f(r['critical_ratio_to_stop_and_rebuild'])} "
                f"| {_f(r['total_ratio_to_stop_and_rebuild'])} | {_f(r['physical_floor_s'])} "
                f"| {_f(r['rollout_start_s'])} "
                f"| {_f(r['critical_over_floor_plus_rollout_start'])} |"
            )
        lines += [
            "",
            "Phases (seconds, mean per resize; (bg) = overlapped with the next step):",
            "",
        ]
        names = sorted({k for r in s["rows"] for k in r["phases_s"]})
        lines.append("| variant | " + " | ".join(names) + " |")
        lines.append("| --- |" + " ---: |" * len(names))
        for r in s["rows"]:
            cells = " | ".join(_f(r["phases_s"].get(n)) for n in names)
            lines.append(f"| {r['variant']} | {cells} |")
        lines.append("")
    return "\n".join(lines)


def _f(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--models", default="tiny", help="Comma-separated model names.")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="Comma-separated variants.")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--chunk-mib", type=int, default=256)
    parser.add_argument("--num-buffers", type=int, default=2)
    parser.add_argument("--torch-threads", type=int, default=4)
    parser.add_argument(
        "--rollout-engines",
        choices=["on_demand", "resident"],
        default="on_demand",
        help="resident: every worker builds its engine at setup and keeps it (no engine start "
        "in a resize).",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--write-preset",
        type=Path,
        default=None,
        help="With --preset-from: fit the twin's resize cost model to a results JSON, write YAML.",
    )
    parser.add_argument("--preset-from", type=Path, default=None, help="A resize_<device>.json.")
    args = parser.parse_args(argv)
    if args.preset_from is not None:
        if args.write_preset is None:
            print("error: --preset-from needs --write-preset", file=sys.stderr)
            return 2
        from resize_preset import write_preset

        data = json.loads(args.preset_from.read_text())
        print(write_preset(data, args.write_preset))
        return 0
    args.variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        print(f"error: unknown variants {unknown}; known: {list(VARIANTS)}", file=sys.stderr)
        return 2
    bandwidth = host_device_bandwidth_gbps(args.device)
    print(f"bandwidth {bandwidth}", flush=True)
    meta = {
        "device": args.device,
        "host": platform.node(),
        "bandwidth": bandwidth,
        "command": "python3 benchmarks/bench_resize.py " + " ".join(sys.argv[1:]),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    done: list[dict] = []

    def write(current: dict | None) -> list[dict]:
        # Written after every variant, so a run cut short keeps what it measured.
        results = [*done, current] if current is not None else list(done)
        summaries = [summarise(r, bandwidth) for r in results]
        (args.out / f"resize_{args.device}.json").write_text(
            json.dumps({"meta": meta, "results": results, "summary": summaries}, indent=1)
        )
        (args.out / f"resize_{args.device}.md").write_text(markdown(summaries, meta))
        return summaries

    for model in [m for m in args.models.split(",") if m]:
        done.append(bench_model(model, args, on_variant=write))
    print(markdown(write(None), meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
