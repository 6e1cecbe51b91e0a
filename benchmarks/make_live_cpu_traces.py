"""Reproduce the small live CPU traces shipped in dynaresize/data/live_cpu_*/.

Two real runs of the live executor on CPU (`dynaresize run --mode live`), from the built-in
`live_cpu` config, that differ in their workload preset: how long the repeat task's answers are
and how heavy their tail is. Each run resizes twice (the `scheduled` policy makes it
deterministic) and visits all three splits, so a calibration can see the training-side scaling.
The notebook 03_calibrate_from_live fits the twin on one run and validates it on the other.

Settings chosen for what a 2-core machine can represent:
- `sync` pipeline: four workers share two cores, so a rollout overlapping a training step would
  slow it down by contention that a twin of separate devices does not model;
- no checkpoints: the time they take sits between steps, outside every cost model.

Each folder holds `trace/` (the Parquet trace), `setup.json` (the executor's start-up timings),
`run_config.yaml` (what ran: `dynaresize run --mode live --config` runs it again) and
`scenario.yaml`, the same without its `live:` section: the twin's view of the four devices, which
`calibrate` and `validate` take as `--config` without loading the live executor's packages.

    python benchmarks/make_live_cpu_traces.py            # both presets, ~3 min each on 2 cores
    python benchmarks/make_live_cpu_traces.py --only long_tail --out /tmp/live
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO / "dynaresize" / "data"
BASE_CONFIG = REPO / "dynaresize" / "configs" / "live_cpu.yaml"
NUM_STEPS = 12

WORKLOAD_PRESETS: dict[str, dict] = {
    # Mostly short answers, a light tail, a low length cap.
    "short_tail": {
        "task": {"pareto_alpha": 2.0, "pareto_scale": 2.0, "max_count": 16},
        "max_response_tokens": 32,
        "schedule": [{"step": 3, "allocation": "3:1"}, {"step": 7, "allocation": "1:3"}],
    },
    # A heavy tail of long answers under a higher cap: rollout-bound.
    "long_tail": {
        "task": {"pareto_alpha": 0.9, "pareto_scale": 4.0, "max_count": 96},
        "max_response_tokens": 96,
        "schedule": [{"step": 4, "allocation": "1:3"}, {"step": 8, "allocation": "3:1"}],
    },
}


def run_config(preset: str, spec: dict | None = None) -> dict:
    """The built-in live_cpu config with this preset's workload, sync mode, no checkpoints.

    `spec` gives a preset of the caller's own (same keys as WORKLOAD_PRESETS' entries).
    """
    spec = spec if spec is not None else WORKLOAD_PRESETS[preset]
    config = copy.deepcopy(yaml.safe_load(BASE_CONFIG.read_text()))
    config["name"] = f"live_cpu_{preset}"
    config["pipeline"] = {**config.get("pipeline", {}), "mode": "sync"}
    # The executor's sampler decodes every sample of a replica at once: no KV-capacity limit.
    costs = config.setdefault("costs", {})
    costs["rollout"] = {**costs.get("rollout", {}), "kv_capacity_tokens_per_replica": None}
    config["simulation"] = {**config.get("simulation", {}), "num_steps": NUM_STEPS}
    live = config["live"]
    live.update(
        {
            "pipeline": "sync",
            "num_steps": NUM_STEPS,
            "checkpoint_every_steps": None,
            "max_response_tokens": spec["max_response_tokens"],
            "task": spec["task"],
            "policy": {"kind": "scheduled", "schedule": spec["schedule"]},
        }
    )
    return config


def keep_run(run_dir: Path, destination: Path, config: dict) -> dict:
    """Replace `destination` with the run's trace and the configs that describe it.

    `run_config.yaml` is what ran, `scenario.yaml` the same without the sections only the live
    executor and the command line read. Both carry the model size the executor counted rather
    than the config's round figure, so the twin models the model that ran. Returns the trace's
    metadata.
    """
    if destination.exists():
        shutil.rmtree(destination)
    destination.mkdir(parents=True)
    shutil.copytree(run_dir / "trace", destination / "trace")
    meta = json.loads((run_dir / "trace" / "meta.json").read_text())
    if meta.get("model_params_b"):
        config["model"]["num_params_b"] = meta["model_params_b"]
    (destination / "run_config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    scenario = {k: v for k, v in config.items() if k not in ("live", "output")}
    (destination / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    return meta


def run_one(preset: str, out_root: Path) -> Path:
    """Run the preset live through the command line; keep its trace and configs."""
    config = run_config(preset)
    destination = out_root / f"live_cpu_{preset}"
    with tempfile.TemporaryDirectory(prefix=f"live_{preset}_") as scratch:
        config_path = Path(scratch) / "config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        run_dir = Path(scratch) / "run"
        started = time.perf_counter()
        command = ["dynaresize", "run", "--mode", "live", "--config", str(config_path)]
        subprocess.run([*command, "--out", str(run_dir)], check=True)
        print(f"{preset}: live run took {time.perf_counter() - started:.0f} s of wall time")
        keep_run(run_dir, destination, config)
        if (run_dir / "setup.json").exists():
            shutil.copy(run_dir / "setup.json", destination / "setup.json")
    return destination


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(WORKLOAD_PRESETS), action="append")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="Parent folder of the runs.")
    args = parser.parse_args(argv)
    for preset in args.only or list(WORKLOAD_PRESETS):
        print(f"wrote {run_one(preset, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
