"""Live runs on one GPU for calibrating and validating the twin (sync pipeline).

The plan: five fitting runs and one held-out run of the four workers sharing the device (gloo
between ranks), with scheduled resizes that visit all three splits:

- `medium` model (about 180 M parameters, Qwen2-shaped), presets `short_tail` and `wide_tail`,
  two resizes each: the stage costs are fitted on these, which between them span small and
  large batches;
- `medium` model, the same two workloads with four resizes each (`*_swing`: every kind of move
  once), so that the resize fit sees more engine starts;
- `small` model (about 24 M), preset `short_tail`: a second model size, so that the resize
  phases see two sizes of state moved and their per-GB rates are determined;
- `medium` model, preset `long_tail`, two resizes (held out: no fitting run has its workload).

Why `sync`: with every role on one device, a rollout that overlaps a training step slows it by
contention that a twin of separate devices does not model; in `sync` each stage has the device
to itself. Rollout replicas on one device still share it, which the rollout model's
`replica_contention_per_extra` describes and the fit determines.

    python3 benchmarks/live_gpu_calibration_runs.py --out OUT_DIR

Each run leaves OUT_DIR/live_gpu_<model>_<preset>/{trace/, scenario.yaml, run_config.yaml};
then, here (the scenario of the medium model says which model the stage costs are for):
    dynaresize calibrate --trace OUT_DIR/live_gpu_medium_short_tail/trace \\
        --trace OUT_DIR/live_gpu_medium_wide_tail/trace \\
        --trace OUT_DIR/live_gpu_medium_short_swing/trace \\
        --trace OUT_DIR/live_gpu_medium_wide_swing/trace \\
        --trace OUT_DIR/live_gpu_small_short_tail/trace \\
        --config OUT_DIR/live_gpu_medium_short_tail/scenario.yaml --out costs.yaml
    dynaresize validate --trace OUT_DIR/live_gpu_medium_long_tail/trace --costs costs.yaml \\
        --config OUT_DIR/live_gpu_medium_long_tail/scenario.yaml
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from make_live_cpu_traces import WORKLOAD_PRESETS, keep_run, run_config  # noqa: E402

QWEN2_SHAPED = {
    "model_type": "qwen2",
    "max_position_embeddings": 1024,
    "tie_word_embeddings": True,
}
MODELS: dict[str, dict] = {
    "small": {
        **QWEN2_SHAPED,
        "hidden_size": 512,
        "intermediate_size": 1536,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
    },
    "medium": {
        **QWEN2_SHAPED,
        "hidden_size": 1024,
        "intermediate_size": 2816,
        "num_hidden_layers": 16,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
    },
}
OUT_AND_BACK = [{"step": 5, "allocation": "3:1"}, {"step": 10, "allocation": "1:3"}]
"""About five steps on each split, for runs of 16 steps: 2:2, then 3:1, then 1:3."""
BACK_AND_OUT = [{"step": 5, "allocation": "1:3"}, {"step": 10, "allocation": "3:1"}]
SWING = [
    {"step": 3, "allocation": "1:3"},
    {"step": 6, "allocation": "3:1"},
    {"step": 9, "allocation": "1:3"},
    {"step": 12, "allocation": "2:2"},
]
"""Four resizes in 16 steps, every kind of move once: rollout gains one GPU, loses two, gains
two, loses one (engine starts of one and of two replicas, for the resize fit)."""
GPU_PRESETS: dict[str, dict] = {
    "short_tail": {**WORKLOAD_PRESETS["short_tail"], "schedule": OUT_AND_BACK},
    "long_tail": {**WORKLOAD_PRESETS["long_tail"], "schedule": BACK_AND_OUT},
    # Long answers under the highest cap, with a heavy tail: the fitting runs' large batches.
    "wide_tail": {
        "task": {"pareto_alpha": 1.1, "pareto_scale": 6.0, "max_count": 128},
        "max_response_tokens": 128,
        "schedule": BACK_AND_OUT,
    },
}
GPU_PRESETS["short_swing"] = {**GPU_PRESETS["short_tail"], "schedule": SWING}
GPU_PRESETS["wide_swing"] = {**GPU_PRESETS["wide_tail"], "schedule": SWING}
"""The CPU traces' presets with schedules for longer runs, and one more for fitting."""
PLAN: tuple[tuple[str, str, int], ...] = (
    ("medium", "short_tail", 16),
    ("medium", "long_tail", 16),
    ("medium", "wide_tail", 16),
    ("small", "short_tail", 12),
    ("medium", "short_swing", 16),
    ("medium", "wide_swing", 16),
)
"""(model, preset, steps) of each run, in order."""


def gpu_config(
    preset: str,
    *,
    model: str,
    num_steps: int,
    device: str = "cuda",
    rollout_engines: str = "resident",
) -> dict:
    config = run_config(preset, GPU_PRESETS[preset])
    config["name"] = f"live_gpu_{model}_{preset}"
    config["simulation"]["num_steps"] = num_steps
    live = config["live"]
    live["device"] = device
    if device == "cuda":
        live["num_gpus"] = 1
    live["num_steps"] = num_steps
    live["rollout_engines"] = rollout_engines
    live["model"] = {"config": MODELS[model]} if model in MODELS else {"preset": model}
    return config


def run_one(
    preset: str, *, out_root: Path, model: str, num_steps: int, device: str, rollout_engines: str
) -> dict:
    config = gpu_config(
        preset, model=model, num_steps=num_steps, device=device, rollout_engines=rollout_engines
    )
    destination = out_root / config["name"]
    with tempfile.TemporaryDirectory(prefix=f"{config['name']}_") as scratch:
        config_path = Path(scratch) / "config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        run_dir = Path(scratch) / "run"
        command = [sys.executable, "-m", "dynaresize.cli"]
        command += ["run", "--mode", "live", "--config", str(config_path), "--out", str(run_dir)]
        started = time.perf_counter()
        # Run from the scratch folder: the repository root holds a `dynaresize/` folder without
        # the mapped subpackages, which would shadow the link tree in the workers.
        subprocess.run(command, check=True, cwd=scratch)
        wall_s = time.perf_counter() - started
        meta = keep_run(run_dir, destination, config)
    print(f"{config['name']}: live run on {device} took {wall_s:.0f} s", flush=True)
    return {
        "name": config["name"],
        "model": model,
        "preset": preset,
        "steps": num_steps,
        "rollout_engines": rollout_engines,
        "wall_s": wall_s,
        "model_params_b": meta.get("model_params_b"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="Parent folder of the runs.")
    parser.add_argument(
        "--only", action="append", help="Run only these plan entries, as MODEL:PRESET."
    )
    parser.add_argument("--steps", type=int, default=None, help="Override every run's steps.")
    parser.add_argument("--device", default="cuda", help="cuda; cpu only to try the script.")
    parser.add_argument(
        "--rollout-engines",
        choices=["resident", "on_demand"],
        default="resident",
        help="resident: engines built at setup and kept (a resize starts none); on_demand: "
        "started when a worker becomes a replica (the earlier runs in "
        "benchmarks/results/live_gpu_calibration/).",
    )
    args = parser.parse_args(argv)
    plan = [p for p in PLAN if not args.only or f"{p[0]}:{p[1]}" in args.only]
    if not plan:
        print(f"error: --only matches no run of {[f'{m}:{p}' for m, p, _ in PLAN]}")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for model, preset, steps in plan:
        runs.append(
            run_one(
                preset,
                out_root=args.out,
                model=model,
                num_steps=args.steps or steps,
                device=args.device,
                rollout_engines=args.rollout_engines,
            )
        )
        # Written after every run, so a run cut short keeps those before it.
        (args.out / "live_gpu_runs.json").write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
