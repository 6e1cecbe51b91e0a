"""Speed of trace I/O: writing and reading a 5,000-step trace with per-sample lengths in both
formats, and the column-wise validation of a large steps table.

    python benchmarks/bench_traces_io.py [--steps 5000 --samples-per-step 512]

Prints the figures and writes benchmarks/results/traces_io.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dynaresize.traces.importers import import_trace
from dynaresize.traces.io import Trace, read_trace, write_trace
from dynaresize.traces.schema import RunMeta
from dynaresize.traces.validation import validate_steps_frame

RESULTS = Path(__file__).resolve().parent / "results"


def build_trace(num_steps: int, samples_per_step: int, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    step_s = rng.uniform(20, 60, num_steps)
    start = np.concatenate([[0.0], np.cumsum(step_s)[:-1]])
    responses = rng.lognormal(np.log(700), 0.8, (num_steps, samples_per_step)).astype(np.int64)
    prompts = rng.integers(100, 800, (num_steps, samples_per_step))
    steps = pd.DataFrame(
        {
            "schema_version": 1,
            "step": np.arange(num_steps),
            "start_s": start,
            "end_s": start + step_s,
            "rollout_s": step_s * 0.8,
            "train_s": step_s * 0.6,
            "sync_s": np.full(num_steps, 5.5),
            "step_s": step_s,
            "idle_train_gpu_s": step_s * 0.4 * 6,
            "idle_rollout_gpu_s": step_s * 0.2 * 2,
            "train_gpus": 6,
            "rollout_gpus": 2,
            "device_roles": [["train"] * 6 + ["rollout"] * 2] * num_steps,
            "resize_id": pd.array([None] * num_steps, dtype="Int64"),
            "rollout_batch_id": np.arange(num_steps),
            "rollout_weights_version": np.maximum(np.arange(num_steps) - 1, 0),
            "num_samples": samples_per_step,
            "tokens": (prompts + responses).sum(axis=1),
            "response_len_mean": responses.mean(axis=1),
            "response_len_p50": np.median(responses, axis=1),
            "response_len_p99": np.percentile(responses, 99, axis=1),
            "response_len_max": responses.max(axis=1).astype(float),
        }
    )
    samples = pd.DataFrame(
        {
            "schema_version": 1,
            "step": np.repeat(np.arange(num_steps), samples_per_step),
            "sample_index": np.tile(np.arange(samples_per_step), num_steps),
            "prompt_tokens": prompts.ravel(),
            "response_tokens": responses.ravel(),
        }
    )
    return Trace(meta=RunMeta(source="benchmark"), steps=steps, samples=samples).validated()


def write_verl_log(path: Path, num_steps: int) -> None:
    """A verl one-step-off log of `num_steps` steps, from the example generator in tools/."""
    import importlib.util

    tool = Path(__file__).resolve().parents[1] / "tools" / "make_verl_example.py"
    spec = importlib.util.spec_from_file_location("make_verl_example", tool)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_jsonl(path, module.one_step_off_lines(num_steps, seed=0))


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--samples-per-step", type=int, default=512)
    parser.add_argument("--validate-rows", type=int, default=1_000_000)
    args = parser.parse_args()
    trace = build_trace(args.steps, args.samples_per_step)
    load_before = os.getloadavg()[0]
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ["trace_dir", "trace.jsonl"]:
            target = Path(tmp) / name
            figures[f"write_{name}_s"], _ = timed(lambda t=target: write_trace(t, trace))
            figures[f"read_{name}_s"], back = timed(lambda t=target: read_trace(t))
            assert len(back.samples) == len(trace.samples)
            size = (
                sum(p.stat().st_size for p in target.rglob("*"))
                if target.is_dir()
                else (target.stat().st_size)
            )
            figures[f"size_{name}_mb"] = size / 1e6
        figures["to_workload_s"], _ = timed(trace.to_workload)
        steps_only = Trace(meta=trace.meta, steps=trace.steps)
        write_trace(Path(tmp) / "steps_only", steps_only)
        figures["read_steps_only_dir_s"], _ = timed(lambda: read_trace(Path(tmp) / "steps_only"))
        verl_log = Path(tmp) / "verl.jsonl"
        write_verl_log(verl_log, args.steps)
        figures[f"import_verl_{args.steps}_steps_s"], _ = timed(lambda: import_trace(verl_log))
    big = trace.steps.loc[np.arange(args.validate_rows) % len(trace.steps)].reset_index(drop=True)
    big["step"] = np.arange(len(big))
    big["start_s"] = big["step"] * 100.0
    big["end_s"] = big["start_s"] + big["step_s"]
    figures[f"validate_steps_frame_{args.validate_rows}_rows_s"], _ = timed(
        lambda: validate_steps_frame(big)
    )
    config = {
        "steps": args.steps,
        "samples_per_step": args.samples_per_step,
        "validate_rows": args.validate_rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "traces_io.json").write_text(json.dumps({"config": config, **figures}, indent=2))
    rows = "\n".join(f"| {k} | {v:.3f} |" for k, v in figures.items())
    (RESULTS / "traces_io.md").write_text(
        f"# Trace I/O ({args.steps} steps x {args.samples_per_step} samples)\n\n"
        f"| figure | value |\n|---|---|\n{rows}\n\n"
        "Measured by `python benchmarks/bench_traces_io.py` on the 2-core development machine, "
        f"1-minute load average {load_before:.1f} before and {os.getloadavg()[0]:.1f} after "
        "(other jobs shared the cores: treat the times as upper bounds).\n"
    )
    for k, v in figures.items():
        print(f"{k:45s} {v:10.3f}")


if __name__ == "__main__":
    main()
