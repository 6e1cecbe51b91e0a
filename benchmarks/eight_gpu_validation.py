"""The eight-GPU validation run: dynamic resizing against every static split, measured, and the
calibrated twin's prediction of the same runs with its error.

On one host with 8 GPUs (4 with `--num-gpus 4`), a 1.54B-parameter Qwen2-shaped model trains
with GRPO on the repeat task through the live executor (`run_live`). Each run has 40 steps of a
few seconds, and its response lengths switch regime at step 20: the first 20 steps cap answers
at 32 tokens, the last 20 at 256, so the long tail of rollout grows eightfold and the split that
balances rollout and training moves. The runs:

1. every static split among the candidates (6:2, 5:3, 4:4, 3:5, 2:6);
2. the hysteresis policy starting from the split that was best over the first regime, once with
   each resize strategy (`overlapped`, `stop_and_rebuild`).

Reported: each run's throughput; the gain of dynamic over the true best static split and over
the first regime's best split; every resize's critical path and background cost for both
strategies (measured from step times, executor/observe/measure.py's rule); the twin's
prediction of every run after calibration (stage costs fitted on the static runs only, resize
phases on the dynamic runs' own resize records) with its error, and the predicted gain against
the measured one (target: within 5%). Files go to benchmarks/results/eight_gpu/.

How the workload is produced, and what that implies:
- The model is randomly initialised with the task's 23-token vocabulary, so it ends answers by
  emitting end-of-sequence at random: answer lengths have a long geometric-like tail under each
  regime's cap. (With Qwen2's 151,936-token vocabulary a random model would almost never end an
  answer and every length would sit at the cap.) Qwen2-1.5B's layer shape with 33 layers keeps
  the model at 1.54B parameters with the small vocabulary. A small learning rate keeps training
  from reshaping the lengths within 40 steps.
- The live executor fixes the length cap for a whole run, so each run is two legs: steps 0-19,
  then `resume` from the checkpoint at step 20 with the second regime's cap. The second leg's
  records continue the first's, with the clock shifted so that step 20 starts where step 19
  ended: the restart (new actors, model load, the first batch of the leg generated before step
  20 instead of during step 19) is left out of every run alike. A dynamic policy is rebuilt at
  the switch, so its smoothing and cooldown start afresh in the second regime.
- NCCL's NVLink multicast stays off (NCCL_NVLS_ENABLE=0) for every process of the run.

Budget: about 6 minutes per run on H200s (two start-ups, 40 steps, two checkpoints), 7 runs.
Run them in pieces if one command is limited in time; results accumulate in the results folder:

    python benchmarks/eight_gpu_validation.py --runs static          # every static split
    python benchmarks/eight_gpu_validation.py --runs dynamic         # both hysteresis runs
    python benchmarks/eight_gpu_validation.py --runs report          # calibrate, predict, write
    python benchmarks/eight_gpu_validation.py                        # all of it

On a machine with fewer GPUs than `--num-gpus` it refuses before starting anything.
"""

from __future__ import annotations

import os

os.environ["NCCL_NVLS_ENABLE"] = "0"  # before Ray or torch start: every worker inherits it

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "eight_gpu"
NUM_STEPS = 40
SWITCH_STEP = 20
REGIME_CAPS = (32, 256)
PROMPTS_PER_STEP = 512
SAMPLES_PER_PROMPT = 4
STRATEGIES = ("overlapped", "stop_and_rebuild")
MODEL_CONFIG = {
    # Qwen2-1.5B's layer shape with 33 layers instead of 28: 1.54B parameters with the task's
    # 23-token vocabulary.
    "model_type": "qwen2",
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 33,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
HYSTERESIS = {
    "kind": "hysteresis",
    "cooldown_steps": 4,
    "dwell_steps": 3,
    "consecutive_signals": 2,
    "move_mode": "predicted_best",
}


def candidates(num_gpus: int) -> list[str]:
    """Splits with at least a quarter of the GPUs on each side (8: 6:2 .. 2:6; 4: 3:1 .. 1:3)."""
    least = max(1, num_gpus // 4)
    return [f"{t}:{num_gpus - t}" for t in range(num_gpus - least, least - 1, -1)]


def require_gpus(num_gpus: int) -> None:
    """Refuse, in one line and before anything starts, on a host with too few GPUs."""
    try:
        import torch

        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        found = 0
    if found < num_gpus:
        print(
            f"error: this run needs {num_gpus} GPUs on one host; this machine has {found} "
            "(use --num-gpus 4 for the four-GPU version, or --runs report to analyse runs "
            "already recorded)",
            file=sys.stderr,
        )
        raise SystemExit(2)


# --- one live run in two legs ---------------------------------------------------------------


def live_config(*, num_gpus: int, start: str, policy: dict, strategy: str, leg: int) -> dict:
    return {
        "model": {"config": MODEL_CONFIG, "dtype": "bfloat16", "init_seed": 0},
        "task": {"max_count": 256},
        "policy": policy,
        "device": "cuda",
        "num_workers": num_gpus,
        "num_gpus": num_gpus,
        "cpus_per_worker": 4,
        "torch_threads_per_worker": 4,
        "initial_allocation": start,
        "candidate_allocations": candidates(num_gpus),
        "num_steps": SWITCH_STEP if leg == 0 else NUM_STEPS,
        "prompts_per_step": PROMPTS_PER_STEP,
        "samples_per_prompt": SAMPLES_PER_PROMPT,
        "max_response_tokens": REGIME_CAPS[leg],
        "micro_batch_samples": 64,
        "optimizer": {"lr": 1e-6},
        "pipeline": "one_step_off",
        "resize_strategy": strategy,
        "checkpoint_every_steps": SWITCH_STEP,
        "seed": 0,
    }


def run_two_legs(name: str, *, num_gpus: int, start: str, policy: dict, strategy: str) -> Path:
    """Steps 0-19 under the first cap, then resume to step 39 under the second; stitch."""
    from dynaresize.executor.config import LiveConfig
    from dynaresize.executor.driver import run_live

    out = RESULTS / "runs" / name
    if out.exists():
        shutil.rmtree(out)
    for leg in (0, 1):
        fields = live_config(
            num_gpus=num_gpus, start=start, policy=policy, strategy=strategy, leg=leg
        )
        config = LiveConfig.model_validate(fields)
        result = run_live(config, out_dir=out / "live", resume=leg == 1)
        print(
            f"{name}: leg {leg + 1} done, {result.steps_completed} steps, "
            f"{result.num_resizes} resizes so far"
        )
    (out / "live_config.json").write_text(json.dumps(fields, indent=2))
    stitched = stitch_legs(out / "live" / "trace", switch_step=SWITCH_STEP)
    from dynaresize.traces.io import write_trace

    write_trace(out / "trace", stitched)
    return out / "trace"


def stitch_legs(trace_dir: Path, *, switch_step: int):
    """One continuous clock: shift the second leg so that its first step starts where the first
    leg's last step ended (the restart between the legs is left out)."""
    from dynaresize.traces.io import Trace, read_trace

    trace = read_trace(trace_dir)
    steps = trace.steps.sort_values("step").reset_index(drop=True)
    first_end = float(steps.loc[steps["step"] == switch_step - 1, "end_s"].iloc[0])
    second_start = float(steps.loc[steps["step"] == switch_step, "start_s"].iloc[0])
    shift = first_end - second_start

    def shifted(frame, columns):
        frame = frame.copy()
        later = frame["step"] >= switch_step
        for column in columns:
            frame.loc[later, column] = frame.loc[later, column] + shift
        return frame

    return Trace(
        meta=trace.meta.model_copy(
            update={
                "notes": [
                    *trace.meta.notes,
                    f"two legs stitched at step {switch_step}: the second leg's clock shifted "
                    f"by {shift:+.3f} s so that step {switch_step} starts where step "
                    f"{switch_step - 1} ended",
                ]
            }
        ),
        steps=shifted(steps, ["start_s", "end_s"]),
        # A resize decided after the last step of a leg never happens: none to shift there.
        resizes=shifted(trace.resizes, ["start_s", "end_s"]),
        decisions=shifted(trace.decisions, ["time_s"]),
        samples=trace.samples,
        extras=trace.extras,
    ).validated(source=str(trace_dir))


# --- measurements of a recorded run ---------------------------------------------------------


def measured(trace) -> dict:
    steps = trace.steps.sort_values("step").reset_index(drop=True)
    total_s = float(steps["end_s"].max() - steps["start_s"].min())
    samples = int(steps["num_samples"].sum())
    first = steps[steps["step"] < SWITCH_STEP]
    split_s = float(first["end_s"].max() - first["start_s"].min())
    return {
        "total_s": total_s,
        "first_regime_s": split_s,
        "samples_per_s": samples / total_s,
        "resizes": resize_costs(steps),
        "allocations": sorted(
            {f"{t}:{r}" for t, r in zip(steps["train_gpus"], steps["rollout_gpus"], strict=True)}
        ),
    }


def resize_costs(steps) -> list[dict]:
    """Critical path: gap before the first step on the new split; background: that step minus
    the next one (None when another resize follows at once)."""
    rows = []
    for i in range(1, len(steps)):
        rid = steps["resize_id"].iloc[i]
        if pd.isna(rid):
            continue
        before, first = steps.iloc[i - 1], steps.iloc[i]
        nxt = steps.iloc[i + 1] if i + 1 < len(steps) else None
        clean = nxt is not None and pd.isna(nxt["resize_id"])
        rows.append(
            {
                "resize_id": int(rid),
                "after_step": int(before["step"]),
                "from": f"{int(before['train_gpus'])}:{int(before['rollout_gpus'])}",
                "to": f"{int(first['train_gpus'])}:{int(first['rollout_gpus'])}",
                "critical_s": float(first["start_s"] - before["end_s"]),
                "background_s": float(first["step_s"] - nxt["step_s"]) if clean else None,
            }
        )
    return rows


# --- the twin, calibrated, predicting the runs ----------------------------------------------


def scenario_config(num_gpus: int, *, model_params_b: float = 1.54) -> dict:
    """The runs' cluster and model for the twin (calibrate and validate take it as --config)."""
    return {
        "name": "eight_gpu_validation",
        "cluster": {
            "gpus_per_node": num_gpus,
            "intra_node_bandwidth_gbps": 450,
            "host_bandwidth_gbps": 55,
            "gpu_memory_gb": 141,
            "candidate_allocations": candidates(num_gpus),
            "initial_allocation": candidates(num_gpus)[0],
        },
        "model": {"num_params_b": model_params_b, "activation_memory_gb_per_gpu": 20},
        "workload": "low_variance",  # never generated from: every analysis replays a trace
        "pipeline": {"mode": "one_step_off"},
        "simulation": {"num_steps": NUM_STEPS},
    }


def calibrate(static_traces: list[Path], dynamic_traces: list[Path], folder: Path) -> Path:
    """Stage costs from the static runs only; resize phases from the dynamic runs' records."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "scenario.yaml"
    stage_costs, resize_costs_file = folder / "costs_stages.yaml", folder / "costs_resizes.yaml"
    for traces, out in ((static_traces, stage_costs), (dynamic_traces, resize_costs_file)):
        command = ["dynaresize", "calibrate", "--config", str(config), "--out", str(out)]
        for trace in traces:
            command += ["--trace", str(trace)]
        report = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        (out.with_suffix(".txt")).write_text(report)
    merged = yaml.safe_load(stage_costs.read_text())
    resize_file = yaml.safe_load(resize_costs_file.read_text())
    resize_section = resize_file.get("resize")
    if resize_section is not None:
        # both files are calibrate's: the resize section keeps the digest it was written with
        merged["resize"] = resize_section
        merged["fitted_on"]["digests"]["resize"] = resize_file["fitted_on"]["digests"]["resize"]
    costs = folder / "costs.yaml"
    costs.write_text(yaml.safe_dump(merged, sort_keys=False))
    return costs


def predict(name: str, trace: Path, costs: Path, config: Path) -> dict:
    from dynaresize.twin.calibration.validate import run_validation

    report = run_validation(
        trace=trace, costs=costs, config=config, out_dir=RESULTS / "validate" / name
    )
    return report.as_dict()


def report(num_gpus: int) -> dict:
    from dynaresize.traces.io import read_trace

    runs = {
        p.name: p / "trace" for p in sorted((RESULTS / "runs").glob("*")) if (p / "trace").is_dir()
    }
    statics = {n: t for n, t in runs.items() if n.startswith("static_")}
    dynamics = {n: t for n, t in runs.items() if n.startswith("hysteresis_")}
    if not statics or not dynamics:
        raise SystemExit(f"error: {RESULTS / 'runs'} needs static_* and hysteresis_* runs first")
    folder = RESULTS / "twin"
    folder.mkdir(parents=True, exist_ok=True)
    size = read_trace(next(iter(statics.values()))).meta.model_params_b or 1.54
    scenario = scenario_config(num_gpus, model_params_b=size)
    (folder / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    costs = calibrate(list(statics.values()), list(dynamics.values()), folder)
    rows = {}
    for name, trace in runs.items():
        row = measured(read_trace(trace))
        row["twin"] = predict(name, trace, costs, folder / "scenario.yaml")
        rows[name] = row
    best_static = min(statics, key=lambda n: rows[n]["total_s"])
    first_best = min(statics, key=lambda n: rows[n]["first_regime_s"])
    twin_total = {n: rows[n]["twin"]["predicted_total_s"] for n in rows}
    twin_best_static = min(statics, key=lambda n: twin_total[n])
    gains = {}
    for name in dynamics:
        measured_gain = rows[best_static]["total_s"] / rows[name]["total_s"] - 1.0
        predicted_gain = twin_total[twin_best_static] / twin_total[name] - 1.0
        gains[name] = {
            "measured_gain_vs_best_static": measured_gain,
            "measured_gain_vs_first_regime_best": rows[first_best]["total_s"]
            / rows[name]["total_s"]
            - 1.0,
            "predicted_gain_vs_best_static": predicted_gain,
            "predicted_gain_vs_first_regime_best": twin_total[first_best] / twin_total[name] - 1.0,
            "gain_error": predicted_gain - measured_gain,
        }
    summary = {
        "num_gpus": num_gpus,
        "num_steps": NUM_STEPS,
        "regime_switch_step": SWITCH_STEP,
        "regime_caps_tokens": list(REGIME_CAPS),
        "best_static": best_static,
        "first_regime_best": first_best,
        "twin_best_static": twin_best_static,
        "runs": rows,
        "gains": gains,
    }
    (RESULTS / "summary.json").write_text(json.dumps(summary, indent=2))
    (RESULTS / "summary.md").write_text(summary_markdown(summary))
    plot_throughput(summary, RESULTS / "throughput.png")
    print(summary_markdown(summary))
    return summary


def summary_markdown(s: dict) -> str:
    lines = [
        f"# Eight-GPU validation run ({s['num_gpus']} GPUs, measured)",
        "",
        f"{s['num_steps']} steps per run; answers capped at {s['regime_caps_tokens'][0]} tokens "
        f"before step {s['regime_switch_step']} and {s['regime_caps_tokens'][1]} after. Best "
        f"static: {s['best_static']}; best over the first regime: {s['first_regime_best']}.",
        "",
        "| run | samples/s | total (s) | twin total (s) | twin total error | median step error |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in s["runs"].items():
        twin = row["twin"]
        lines.append(
            f"| {name} | {row['samples_per_s']:.1f} | {row['total_s']:.1f} | "
            f"{twin['predicted_total_s']:.1f} | {twin['total_time_error']:+.1%} | "
            f"{twin['step_ape_median']:.1%} |"
        )
    lines += [
        "",
        "| dynamic run | gain vs best static (measured / twin) | gain vs first-regime "
        "best (measured / twin) | twin gain error |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, g in s["gains"].items():
        lines.append(
            f"| {name} | {g['measured_gain_vs_best_static']:+.1%} / "
            f"{g['predicted_gain_vs_best_static']:+.1%} | "
            f"{g['measured_gain_vs_first_regime_best']:+.1%} / "
            f"{g['predicted_gain_vs_first_regime_best']:+.1%} | {g['gain_error']:+.1%} |"
        )
    lines += ["", "| run | after step | move | critical path (s) | background (s) |"]
    lines += ["| --- | ---: | --- | ---: | ---: |"]
    for name, row in s["runs"].items():
        for r in row["resizes"]:
            background = "n/a" if r["background_s"] is None else f"{r['background_s']:.2f}"
            lines.append(
                f"| {name} | {r['after_step']} | {r['from']} -> {r['to']} | "
                f"{r['critical_s']:.2f} | {background} |"
            )
    lines += ["", "Command: `python benchmarks/eight_gpu_validation.py`."]
    return "\n".join(lines) + "\n"


def plot_throughput(s: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    names = list(s["runs"])
    measured_rate = [s["runs"][n]["samples_per_s"] for n in names]
    twin_rate = [
        s["runs"][n]["samples_per_s"]
        * s["runs"][n]["total_s"]
        / s["runs"][n]["twin"]["predicted_total_s"]
        for n in names
    ]
    fig = Figure(figsize=(10, 4.5), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(names))
    ax.bar(x - 0.2, measured_rate, width=0.4, label="measured")
    ax.bar(x + 0.2, twin_rate, width=0.4, label="twin (calibrated)")
    ax.set_xticks(x, names, rotation=20, ha="right")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_title(f"{s['num_gpus']}-GPU runs: measured against the calibrated twin")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=110)


# --- driving it -----------------------------------------------------------------------------


def run_statics(num_gpus: int) -> None:
    for split in candidates(num_gpus):
        name = f"static_{split.replace(':', '-')}"
        run_two_legs(
            name, num_gpus=num_gpus, start=split, policy={"kind": "static"}, strategy="overlapped"
        )


def run_dynamics(num_gpus: int) -> None:
    from dynaresize.traces.io import read_trace

    firsts = {}
    for split in candidates(num_gpus):
        trace = RESULTS / "runs" / f"static_{split.replace(':', '-')}" / "trace"
        if not trace.is_dir():
            raise SystemExit(f"error: run the static splits first ({trace} is missing)")
        firsts[split] = measured(read_trace(trace))["first_regime_s"]
    start = min(firsts, key=firsts.get)
    print(f"best split over the first regime: {start}")
    for strategy in STRATEGIES:
        run_two_legs(
            f"hysteresis_{strategy}",
            num_gpus=num_gpus,
            start=start,
            policy=HYSTERESIS,
            strategy=strategy,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-gpus", type=int, choices=(4, 8), default=8)
    parser.add_argument(
        "--runs",
        choices=("all", "static", "dynamic", "report"),
        default="all",
        help="Which part to do; results accumulate under benchmarks/results/eight_gpu/.",
    )
    args = parser.parse_args(argv)
    if args.runs != "report":
        require_gpus(args.num_gpus)
    if args.runs in ("all", "static"):
        run_statics(args.num_gpus)
    if args.runs in ("all", "dynamic"):
        run_dynamics(args.num_gpus)
    if args.runs in ("all", "report"):
        report(args.num_gpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
