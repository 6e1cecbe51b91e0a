"""Live runs on one GPU for calibrating and validating the twin (sync pipeline).

The same two workload presets as benchmarks/make_live_cpu_traces.py (short_tail and long_tail,
each with two scheduled resizes), run by the live executor on CUDA with its workers sharing the
one device (gloo between ranks). The model is a small Qwen2-shaped one so that a step takes about
a second and both runs fit a short GPU lease; `--model qwen2-0.5b` takes the larger preset.

Why `sync`: with every role on one device, a rollout that overlaps a training step slows it by
contention that a twin of separate devices does not model; in `sync` each stage has the device
to itself, so the stage times are what the cost models describe.

    python3 tools/devpath.py benchmarks/live_gpu_calibration_runs.py --out OUT_DIR

Each run leaves OUT_DIR/live_gpu_<preset>/{trace/, scenario.yaml, run_config.yaml}; then, here:
    dynaresize calibrate --trace OUT_DIR/live_gpu_short_tail/trace \
        --config OUT_DIR/live_gpu_short_tail/scenario.yaml --out costs.yaml
    dynaresize validate --trace OUT_DIR/live_gpu_long_tail/trace --costs costs.yaml \
        --config OUT_DIR/live_gpu_long_tail/scenario.yaml
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

SMALL_QWEN2 = {
    "model_type": "qwen2",
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": True,
}


def gpu_config(preset: str, *, model: str, num_steps: int, device: str = "cuda") -> dict:
    config = run_config(preset)
    config["name"] = f"live_gpu_{preset}"
    config["simulation"]["num_steps"] = num_steps
    live = config["live"]
    live["device"] = device
    if device == "cuda":
        live["num_gpus"] = 1
    live["num_steps"] = num_steps
    live["model"] = {"config": SMALL_QWEN2} if model == "small" else {"preset": model}
    return config


def run_one(preset: str, *, out_root: Path, model: str, num_steps: int, device: str) -> dict:
    config = gpu_config(preset, model=model, num_steps=num_steps, device=device)
    destination = out_root / f"live_gpu_{preset}"
    with tempfile.TemporaryDirectory(prefix=f"live_gpu_{preset}_") as scratch:
        config_path = Path(scratch) / "config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        run_dir = Path(scratch) / "run"
        command = [sys.executable, str(REPO / "tools" / "devpath.py"), "-m", "dynaresize.cli"]
        command += ["run", "--mode", "live", "--config", str(config_path), "--out", str(run_dir)]
        started = time.perf_counter()
        # Run from the scratch folder: the repository root holds a `dynaresize/` folder without
        # the mapped subpackages, which would shadow the link tree in the workers.
        subprocess.run(command, check=True, cwd=scratch)
        wall_s = time.perf_counter() - started
        meta = keep_run(run_dir, destination, config)
    print(f"{preset}: live run on {device} took {wall_s:.0f} s", flush=True)
    return {"preset": preset, "wall_s": wall_s, "model_params_b": meta.get("model_params_b")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="Parent folder of the runs.")
    parser.add_argument("--only", choices=sorted(WORKLOAD_PRESETS), action="append")
    parser.add_argument("--model", default="small", help="small, qwen2-0.5b or qwen2-1.5b.")
    parser.add_argument("--steps", type=int, default=12, help="Training steps per run.")
    parser.add_argument("--device", default="cuda", help="cuda; cpu only to try the script.")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [
        run_one(p, out_root=args.out, model=args.model, num_steps=args.steps, device=args.device)
        for p in args.only or list(WORKLOAD_PRESETS)
    ]
    (args.out / "live_gpu_runs.json").write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
