"""The twin's projection of the eight-GPU validation run: a projection, not a measurement.

The run itself (benchmarks/eight_gpu_validation.py) needs one host with 8 GPUs. Until it can
run, this script asks the twin what it should find, on the scenario that describes it
(dynaresize/configs/eight_gpu_regime_switch.yaml): every static split among the candidates, then
the hysteresis policy starting from the split best for the first regime, with each resize
strategy, and the offline optimum as a bound. Every cost is an assumption stated in that config.

    python benchmarks/eight_gpu_twin_projection.py

Writes benchmarks/results/eight_gpu_twin_projection.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
CONFIG = REPO / "dynaresize" / "configs" / "eight_gpu_regime_switch.yaml"
LABEL = "TWIN PROJECTION (not a measurement)"


def regime_switch_step(config) -> int:
    switches = sorted(s.at_step for s in config.workload.regime_switches)
    if not switches:
        raise ValueError(f"{CONFIG.name}: the workload has no regime switch")
    return switches[0]


def project(config_path: Path) -> dict:
    from dynaresize.config import load_run_config
    from dynaresize.policies.types import Allocation
    from dynaresize.traces.phases import StrategyName
    from dynaresize.twin.optimal import optimum_of_context
    from dynaresize.twin.simulation import build_context, simulate

    config = load_run_config(str(config_path))
    switch = regime_switch_step(config)
    context = build_context(config)
    costs = context.step_costs
    labels = [c.label for c in costs.candidates]
    first_regime_s = costs.step_s[:switch].sum(axis=0)
    second_regime_s = costs.step_s[switch:].sum(axis=0)
    first_best = labels[int(np.argmin(first_regime_s))]
    statics = {
        label: {
            "total_s": float(costs.step_s[:, i].sum()),
            "first_regime_mean_step_s": float(costs.step_s[:switch, i].mean()),
            "second_regime_mean_step_s": float(costs.step_s[switch:, i].mean()),
        }
        for i, label in enumerate(labels)
    }
    best_static = min(statics, key=lambda k: statics[k]["total_s"])
    policy = config.policies[0] if config.policies else {"kind": "hysteresis"}
    dynamic: dict[str, dict] = {}
    for strategy in StrategyName:
        scenario = config.model_copy(
            update={
                "cluster": config.cluster.model_copy(
                    update={"initial_allocation": Allocation.parse(first_best)}
                ),
                "pipeline": config.pipeline.model_copy(update={"resize_strategy": strategy}),
            }
        )
        run_context = build_context(scenario)
        result = simulate(scenario, policy, context=run_context)
        plan = run_context.plan
        resizes = _resize_rows(result)
        dynamic[strategy.value] = {
            "total_s": result.summary.total_s,
            "num_resizes": result.summary.num_resizes,
            "resize_stall_s": result.summary.resize_time_s,
            "planned_critical_s": plan.critical_s,
            "planned_background_slowdown_s": plan.slowdown_s,
            "resizes": resizes,
            "train_gpus_per_step": result.steps["train_gpus"].astype(int).tolist(),
            "step_s": result.steps["step_s"].astype(float).tolist(),
        }
    optimum = optimum_of_context(context)
    num_steps = config.simulation.num_steps
    samples = config.workload.samples_per_step
    out = {
        "label": LABEL,
        "config": str(config_path.relative_to(REPO)),
        "num_steps": num_steps,
        "regime_switch_step": switch,
        "candidates": labels,
        "static": statics,
        "best_static": best_static,
        "first_regime_best": first_best,
        "second_regime_best": labels[int(np.argmin(second_regime_s))],
        "dynamic_policy": policy.model_dump(mode="json")
        if hasattr(policy, "model_dump")
        else policy,
        "dynamic": dynamic,
        "offline_optimum_total_s": optimum.total_s,
        "throughput_samples_per_s": {
            **{f"static {k}": num_steps * samples / v["total_s"] for k, v in statics.items()},
            **{f"hysteresis ({k})": num_steps * samples / v["total_s"] for k, v in dynamic.items()},
        },
    }
    for run in dynamic.values():
        run["gain_vs_best_static"] = statics[best_static]["total_s"] / run["total_s"] - 1.0
        run["gain_vs_first_regime_best"] = statics[first_best]["total_s"] / run["total_s"] - 1.0
        run["regret_vs_optimum"] = run["total_s"] / optimum.total_s - 1.0
    return out


def _resize_rows(result) -> list[dict]:
    """Each resize: when, from and to, critical path and background slowdown as simulated."""
    steps = result.steps.reset_index(drop=True)
    rows = []
    for index in range(1, len(steps)):
        resize_id = steps["resize_id"].iloc[index]
        if resize_id is None or (isinstance(resize_id, float) and np.isnan(resize_id)):
            continue
        try:
            resize_id = int(resize_id)
        except (TypeError, ValueError):
            continue
        before, after = steps.iloc[index - 1], steps.iloc[index]
        phases = result.resizes[result.resizes["resize_id"] == resize_id]
        rows.append(
            {
                "resize_id": resize_id,
                "after_step": int(before["step"]),
                "from": f"{int(before['train_gpus'])}:{int(before['rollout_gpus'])}",
                "to": f"{int(after['train_gpus'])}:{int(after['rollout_gpus'])}",
                "critical_s": float(after["start_s"] - before["end_s"]),
                "background_phase_s": float(
                    (
                        phases.loc[~phases["critical"].astype(bool), "end_s"]
                        - phases.loc[~phases["critical"].astype(bool), "start_s"]
                    ).sum()
                ),
            }
        )
    return rows


def markdown(result: dict) -> str:
    statics = result["static"]
    lines = [
        f"# Eight-GPU regime-switch run: {LABEL}",
        "",
        "No GPU ran this. The twin simulated the scenario of `"
        + result["config"]
        + "` (8 H200s, a 1.5B model, "
        f"{result['num_steps']} steps, lengths jump at step {result['regime_switch_step']}); every "
        "cost parameter is an assumption stated in that file. The measured run is "
        "`benchmarks/eight_gpu_validation.py`.",
        "",
        "| run | total (s) | samples/s | mean step, regime 1 (s) | mean step, regime 2 (s) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, row in statics.items():
        mark = []
        if label == result["best_static"]:
            mark.append("best static")
        if label == result["first_regime_best"]:
            mark.append("best for regime 1")
        name = f"static {label}" + (f" ({', '.join(mark)})" if mark else "")
        lines.append(
            f"| {name} | {row['total_s']:.1f} | "
            f"{result['throughput_samples_per_s'][f'static {label}']:.0f} | "
            f"{row['first_regime_mean_step_s']:.2f} | {row['second_regime_mean_step_s']:.2f} |"
        )
    for strategy, run in result["dynamic"].items():
        lines.append(
            f"| hysteresis from {result['first_regime_best']}, {strategy} | {run['total_s']:.1f} | "
            f"{result['throughput_samples_per_s'][f'hysteresis ({strategy})']:.0f} | | |"
        )
    lines += [
        f"| offline optimum (bound) | {result['offline_optimum_total_s']:.1f} | | | |",
        "",
        "| strategy | resizes | gain vs best static | gain vs regime-1 best | regret vs optimum |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for strategy, run in result["dynamic"].items():
        lines.append(
            f"| {strategy} | {run['num_resizes']} | {run['gain_vs_best_static']:+.1%} | "
            f"{run['gain_vs_first_regime_best']:+.1%} | {run['regret_vs_optimum']:+.1%} |"
        )
    lines += ["", "Every resize (critical path and background phases, as simulated):", ""]
    lines += ["| strategy | after step | move | critical (s) | background phases (s) |"]
    lines += ["| --- | ---: | --- | ---: | ---: |"]
    for strategy, run in result["dynamic"].items():
        for r in run["resizes"]:
            lines.append(
                f"| {strategy} | {r['after_step']} | {r['from']} -> {r['to']} | "
                f"{r['critical_s']:.2f} | {r['background_phase_s']:.2f} |"
            )
    lines += [
        "",
        "Gain is the static run's total time over the dynamic run's, minus one. Command: "
        "`python benchmarks/eight_gpu_twin_projection.py`.",
    ]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.6), layout="constrained")
    bars, timeline = fig.subplots(1, 2, width_ratios=[1, 1.4])
    names = [f"static {k}" for k in result["static"]]
    totals = [v["total_s"] for v in result["static"].values()]
    names += [f"hysteresis, {k}" for k in result["dynamic"]]
    totals += [v["total_s"] for v in result["dynamic"].values()]
    names.append("offline optimum")
    totals.append(result["offline_optimum_total_s"])
    colors = ["C7"] * len(result["static"]) + ["C2"] * len(result["dynamic"]) + ["C3"]
    positions = np.arange(len(names))
    bars.barh(positions, totals, color=colors)
    bars.set_yticks(positions, names)
    bars.invert_yaxis()
    bars.set_xlabel("total time of the run (s)")
    bars.set_title(f"{LABEL}\n8 GPUs, 1.5B model, {result['num_steps']} steps")
    bars.grid(axis="x", alpha=0.3)
    steps = np.arange(result["num_steps"])
    for strategy, run in result["dynamic"].items():
        timeline.plot(steps, run["step_s"], lw=1.2, label=f"step time, hysteresis ({strategy})")
    twin = timeline.twinx()
    first = next(iter(result["dynamic"].values()))
    twin.step(steps, first["train_gpus_per_step"], where="post", color="C3", lw=1.0)
    twin.set_ylabel("training GPUs (hysteresis, overlapped)", color="C3")
    twin.set_ylim(0, 8)
    timeline.axvline(result["regime_switch_step"] - 0.5, color="0.4", ls=":", label="regime switch")
    timeline.set_xlabel("step")
    timeline.set_ylabel("step time (s)")
    timeline.grid(alpha=0.3)
    timeline.legend(fontsize=8, loc="upper left")
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = project(args.config.resolve())
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = args.out_dir / "eight_gpu_twin_projection"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2))
    stem.with_suffix(".md").write_text(markdown(result))
    plot(result, stem.with_suffix(".png"))
    print(markdown(result))
    print(f"wrote {stem}.json, .md, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
