"""A live run measured end to end: setup, every step's stages, every resize phase.

Runs `run_live` with the `scheduled` policy moving workers both ways, then reads the run's own
records and prints and writes a summary. On the lent H200 all workers share the one GPU (a
fraction of it each) and talk over gloo; see the written markdown for which figures that makes
representative.

    python3 benchmarks/bench_live.py --device cuda --out-dir results/  # H200
    python benchmarks/bench_live.py --device cpu                                          # CPU
    python3 benchmarks/bench_live.py --device cuda --engine vllm --release sleep --tag vllm_sleep

`--engine vllm` generates with vLLM (`--release` sleep, destroy, keep or auto; `--kv-gib` of KV
cache per engine, `--batch-invariant`, `--cuda-graphs`); `--schedule` replaces the policy's
schedule (another schedule for a validation run). Besides every step and phase, the summary names
the figures a resize is judged by: `add_two_replicas_critical_path_s` (a move that adds two
replicas), `remove_replica_critical_path_s` (one that removes one), `sync_s_median`,
`rollout_s_median` and `setup_total_s`. `--run-dir` keeps the run folder (its trace feeds
`dynaresize calibrate`).

Writes live_<tag>.json and live_<tag>.md into --out-dir (default benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def qwen2_0_5b_untied() -> dict:
    """The Qwen2-0.5B shape with Qwen2's vocabulary and untied input/output embeddings: 0.63B
    parameters, so that the run is above half a billion whatever the tokenizer."""
    from dynaresize.executor.rl.model_spec import QWEN2_VOCAB_SIZE, preset_architecture

    return {
        **preset_architecture("qwen2-0.5b"),
        "tie_word_embeddings": False,
        "vocab_size": QWEN2_VOCAB_SIZE,
    }


def live_fields(device: str) -> dict:
    if device == "cuda":
        return {
            "model": {"config": qwen2_0_5b_untied(), "dtype": "bfloat16"},
            "device": "cuda",
            "num_gpus": 1,
            "num_workers": 4,
            "cpus_per_worker": 3,
            "torch_threads_per_worker": 3,
            "initial_allocation": "2:2",
            "candidate_allocations": ["3:1", "2:2", "1:3"],
            "num_steps": 5,
            "prompts_per_step": 32,
            "samples_per_prompt": 4,
            "max_response_tokens": 128,
            "micro_batch_samples": 32,
            "optimizer": {"lr": 1e-5},
            "task": {"max_count": 120},
            "policy": {"kind": "scheduled", "schedule": "1@3:1;3@1:3"},
            "checkpoint_every_steps": None,
            "resize_strategy": "overlapped",
        }
    return {
        "num_workers": 4,
        "initial_allocation": "2:2",
        "candidate_allocations": ["3:1", "2:2", "1:3"],
        "num_steps": 7,
        "prompts_per_step": 8,
        "samples_per_prompt": 4,
        "max_response_tokens": 48,
        "policy": {"kind": "scheduled", "schedule": "1@3:1;3@1:3;5@2:2"},
        "checkpoint_every_steps": None,
    }


def summarize(out: Path, wall_s: float, config) -> dict:
    from dynaresize.traces.io import read_trace

    trace = read_trace(out / "trace")
    steps = trace.steps.sort_values("step")
    resizes = trace.resizes
    phases = []
    for row in resizes.itertuples():
        phases.append(
            {
                "resize_id": int(row.resize_id),
                "after_step": int(row.step),
                "move": f"{row.from_allocation}->{row.to_allocation}",
                "phase": str(row.phase),
                "duration_s": float(row.end_s - row.start_s),
                "bytes_moved": int(row.bytes_moved),
            }
        )
    gaps = []
    for resize_id, group in resizes.groupby("resize_id"):
        before = steps[steps.step == group.step.iloc[0]].iloc[0]
        after = steps[steps.step == group.step.iloc[0] + 1].iloc[0]
        gaps.append(
            {
                "resize_id": int(resize_id),
                "move": f"{group.from_allocation.iloc[0]}->{group.to_allocation.iloc[0]}",
                "critical_path_s": float(after.start_s - before.end_s),
                "sum_of_phases_s": float((group.end_s - group.start_s).sum()),
            }
        )
    step_rows = [
        {
            "step": int(r.step),
            "split": f"{r.train_gpus}:{r.rollout_gpus}",
            "rollout_s": float(r.rollout_s),
            "train_s": float(r.train_s),
            "sync_s": float(r.sync_s),
            "step_s": float(r.step_s),
            "tokens": int(r.tokens),
            "response_len_mean": float(r.response_len_mean),
            "response_len_max": float(r.response_len_max),
        }
        for r in steps.itertuples()
    ]
    setup = json.loads((out / "setup.json").read_text())
    return {
        **judged_figures(gaps, step_rows),
        "setup_total_s": float(sum(v for v in setup.values() if isinstance(v, int | float))),
        "device": trace.meta.gpu_type,
        "model_params_b": trace.meta.model_params_b,
        "platform": platform.platform(),
        "num_workers": config.num_workers,
        "samples_per_step": config.samples_per_step,
        "max_response_tokens": config.max_response_tokens,
        "wall_s": wall_s,
        "setup_s": json.loads((out / "setup.json").read_text()),
        "resize_strategy": ", ".join(sorted(resizes["strategy"].unique())) or "none",
        "steps": step_rows,
        "resizes": gaps,
        "phases": phases,
    }


def judged_figures(gaps: list[dict], steps: list[dict]) -> dict:
    """The critical path of the first move adding two replicas and of the first removing one,
    and the median sync and rollout seconds of the steps."""

    def rollout_count(split: str) -> int:
        return int(split.split(":")[1])

    def first_move(change: int) -> float | None:
        for gap in gaps:
            before, after = gap["move"].split("->")
            if rollout_count(after) - rollout_count(before) == change:
                return gap["critical_path_s"]
        return None

    return {
        "add_two_replicas_critical_path_s": first_move(+2),
        "remove_replica_critical_path_s": first_move(-1),
        "sync_s_median": statistics.median(s["sync_s"] for s in steps),
        "rollout_s_median": statistics.median(s["rollout_s"] for s in steps),
    }


def engine_fields(args: argparse.Namespace) -> dict:
    """The `rollout_engine` section and schedule the command line asks for."""
    fields: dict = {}
    if args.engine == "vllm":
        vllm = {
            "kv_cache_memory_gb": args.kv_gib,
            "batch_invariant": args.batch_invariant,
            "enforce_eager": not args.cuda_graphs,
        }
        fields["rollout_engine"] = {"kind": "vllm", "release": args.release, "vllm": vllm}
    elif args.release != "auto":
        fields["rollout_engine"] = {"kind": args.engine, "release": args.release}
    if args.schedule:
        fields["policy"] = {"kind": "scheduled", "schedule": args.schedule}
    return fields


def markdown(result: dict, device: str) -> str:
    lines = [
        f"# Live run on {result['device']} ({device})",
        "",
        f"{result['num_workers']} workers, a {result['model_params_b']:.2f}B-parameter model, "
        f"{result['samples_per_step']} samples per step, responses capped at "
        f"{result['max_response_tokens']} tokens; whole run {result['wall_s']:.1f} s. "
        f"Command: `{result.get('command', 'python3 benchmarks/bench_live.py')}`.",
        "",
        "| figure | s |",
        "| --- | ---: |",
        *[
            f"| {k} | {'-' if result.get(k) is None else format(result[k], '.3f')} |"
            for k in (
                "add_two_replicas_critical_path_s",
                "remove_replica_critical_path_s",
                "sync_s_median",
                "rollout_s_median",
                "setup_total_s",
            )
        ],
        "",
        "## Setup (s)",
        "",
        "| part | s |",
        "| --- | ---: |",
        *[f"| {k} | {v:.2f} |" for k, v in result["setup_s"].items()],
        "",
        "## Steps",
        "",
        "| step | split | rollout_s | train_s | sync_s | step_s | tokens | mean len | max len |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *[
            f"| {s['step']} | {s['split']} | {s['rollout_s']:.2f} | {s['train_s']:.2f} | "
            f"{s['sync_s']:.2f} | {s['step_s']:.2f} | {s['tokens']} | "
            f"{s['response_len_mean']:.1f} | {s['response_len_max']:.0f} |"
            for s in result["steps"]
        ],
        "",
        f"## Resizes ({result['resize_strategy']})",
        "",
        "| resize | move | critical path (gap between steps) s | sum of all phases s |",
        "| ---: | --- | ---: | ---: |",
        *[
            f"| {g['resize_id']} | {g['move']} | {g['critical_path_s']:.2f} | "
            f"{g['sum_of_phases_s']:.2f} |"
            for g in result["resizes"]
        ],
        "",
        "| resize | phase | s | bytes |",
        "| ---: | --- | ---: | ---: |",
        *[
            f"| {p['resize_id']} | {p['phase']} | {p['duration_s']:.3f} | {p['bytes_moved']:,} |"
            for p in result["phases"]
        ],
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument("--tag", default=None, help="File name tag (default: h200 or cpu).")
    parser.add_argument("--run-dir", type=Path, default=None, help="Run folder (default: temp).")
    parser.add_argument("--engine", choices=["own", "hf", "vllm"], default="own")
    parser.add_argument("--release", choices=["auto", "destroy", "keep", "sleep"], default="auto")
    parser.add_argument("--kv-gib", type=float, default=8.0, help="vLLM KV cache per engine.")
    parser.add_argument("--batch-invariant", action="store_true", help="vLLM batch-invariant.")
    parser.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="vLLM with torch.compile and CUDA graphs (enforce_eager: false): slower setup, "
        "decode iterations bound by the device rather than by kernel launches.",
    )
    parser.add_argument("--schedule", default=None, help="The scheduled policy's schedule.")
    parser.add_argument("--steps", type=int, default=None, help="Steps (default: the preset's).")
    parser.add_argument(
        "--pipeline",
        choices=["sync", "one_step_off"],
        default=None,
        help="Pipeline mode (default: the live config's). A twin calibrated on roles that share "
        "one GPU needs `sync`: overlapped rollout and training contend for the device.",
    )
    args = parser.parse_args()

    from dynaresize.executor.config import LiveConfig
    from dynaresize.executor.driver import run_live

    fields = {**live_fields(args.device), **engine_fields(args)}
    if args.steps is not None:
        fields["num_steps"] = args.steps
    if args.pipeline is not None:
        fields["pipeline"] = args.pipeline
    config = LiveConfig.model_validate(fields)
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="bench_live_"))
    start = time.perf_counter()
    run_live(config, out_dir=run_dir)
    wall_s = time.perf_counter() - start
    result = summarize(run_dir, wall_s, config)
    result["command"] = "python3 benchmarks/bench_live.py " + " ".join(sys.argv[1:])
    tag = args.tag or ("h200" if args.device == "cuda" else "cpu")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"live_{tag}.json").write_text(json.dumps(result, indent=2))
    text = markdown(result, args.device)
    (args.out_dir / f"live_{tag}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
