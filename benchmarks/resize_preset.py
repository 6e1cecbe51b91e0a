"""Fit the twin's resize cost model (twin/costs/resize.py) to a resize benchmark's results.

Every phase of each strategy becomes `base_s + s_per_gb * gb`, over every resize the phase runs
on, where `gb` is the model's state of the kind the phase moves, or the share of it that changes
owner for phases that re-cut the trainers' slices (the twin's own byte accounting); with results
for two or more model sizes the line is a least-squares fit (clamped to non-negative values), with
one size the mean becomes `base_s`. Phases the strategy did not run get zero cost, so the twin's
defaults for them do not leak in. The dependency chains are the order in which the executor's
strategies run their phases. The written file is loaded back through `load_costs` and its
predicted critical path is printed beside the measured one.

    python3 benchmarks/bench_resize.py --preset-from benchmarks/results/resize_cpu.json \\
        --write-preset /tmp/costs.yaml
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import yaml

from dynaresize.policies.types import Allocation

CHAINS: dict[str, list[str]] = {
    # Critical phases, in the order the executor's strategies run them.
    "overlapped": [
        "state_export",
        "worker_reinit",
        "rollout_reinit",
        "comm_prewarm",
        "weight_restore",
        "postprocess",
        "weight_sync",
    ],
    "stop_and_rebuild": [
        "state_export",
        "worker_reinit",
        "comm_prewarm",
        "weight_restore",
        "optimizer_restore",
        "rollout_reinit",
        "postprocess",
        "weight_sync",
    ],
}
BACKGROUND = {"overlapped": {"optimizer_restore": "weight_restore"}, "stop_and_rebuild": {}}
MOVES = {
    "state_export": "train_state",
    "weight_restore": "weights",
    "optimizer_restore": "optimizer_state",
}
RECUT = {
    "overlapped": {
        "weight_restore": "master_weights",
        "optimizer_restore": "optimizer_moments",
    },
    "stop_and_rebuild": {},
}
"""Phases that move only the re-cut share of a state (the changed-owner share of the trainers'
slices), and which state: the overlapped strategy's master slices and moments. Stop-and-rebuild
checkpoints and reloads the whole state."""
ONE_DIRECTION = {
    "overlapped": {"worker_reinit": "gaining_training", "rollout_reinit": "gaining_rollout"},
    "stop_and_rebuild": {"rollout_reinit": "gaining_rollout"},
}
"""Phases that run on moves of one direction only: engines start only where rollout gains GPUs,
and the overlapped strategy's role switch sets up arriving trainers, which a move towards rollout
does not have."""
GROWS_WITH_WEIGHTS = {"stop_and_rebuild": {"worker_reinit", "postprocess"}, "overlapped": set()}
"""Phases that move no state but whose time grows with the model: stop-and-rebuild's new actors
build the model from scratch, and its post-processing reloads the rollout engines' weights."""


def _model_gb(num_params: int, *, weight_bytes: float) -> dict[str, float]:
    from dynaresize.twin.costs.memory import ModelConfig
    from dynaresize.twin.costs.resize import StateMoved, gb_moved

    model = ModelConfig(num_params_b=num_params / 1e9, weight_bytes_per_param=weight_bytes)
    return {kind.value: gb_moved(kind, model) for kind in StateMoved}


def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(base_s, s_per_gb) through the points, both non-negative."""
    if not points:
        return 0.0, 0.0
    xs, ys = zip(*points, strict=True)
    if len(set(xs)) < 2:
        return max(statistics.fmean(ys), 0.0), 0.0
    slope, base = statistics.linear_regression(xs, ys)
    if slope < 0:
        return max(statistics.fmean(ys), 0.0), 0.0
    if base < 0:
        return 0.0, max(sum(y for y in ys) / sum(xs), 0.0) if sum(xs) > 0 else 0.0
    return base, slope


def _move(resize: dict) -> tuple[Allocation, Allocation]:
    """The resize's splits before and after (train:rollout labels)."""
    return Allocation.parse(resize["from"]), Allocation.parse(resize["to"])


def _runs_on(strategy: str, name: str, resize: dict) -> bool:
    """Whether the phase runs on this resize's move (the twin's rule)."""
    from dynaresize.twin.costs.resize import PhaseCostParams, runs_on_move

    before, after = _move(resize)
    spec = PhaseCostParams(base_s=0.0, on_moves=ONE_DIRECTION[strategy].get(name, "any"))
    return runs_on_move(spec, gains_rollout=after.rollout_gpus > before.rollout_gpus)


def _share(strategy: str, name: str, resize: dict) -> float:
    """Share of the phase's state that the resize moves (1 unless the phase re-cuts)."""
    from dynaresize.twin.costs.resize import changed_owner_fraction

    if name not in RECUT[strategy]:
        return 1.0
    before, after = _move(resize)
    return changed_owner_fraction(before.train_gpus, after.train_gpus)


def _phase_points(
    variant: dict, strategy: str, gb: dict[str, float], *, critical: bool
) -> dict[str, list[tuple[float, float]]]:
    """(GB moved, seconds) of every phase of one criticality on every resize it runs on."""
    points: dict[str, list[tuple[float, float]]] = {}
    for resize in variant["resizes"]:
        for p in resize["phases"]:
            name = p["phase"]
            if p["critical"] is not critical or not _runs_on(strategy, name, resize):
                continue
            moved = gb[_moves(strategy, name)] * _share(strategy, name, resize)
            points.setdefault(name, []).append((moved, p["duration_s"]))
    return points


def _moves(strategy: str, name: str) -> str:
    if name in GROWS_WITH_WEIGHTS[strategy]:
        return "weights"
    return RECUT[strategy].get(name) or MOVES.get(name, "none")


def fit_resize_params(data: dict[str, Any], *, weight_bytes: float) -> dict[str, Any]:
    bandwidth = data["meta"]["bandwidth"]
    out: dict[str, Any] = {
        "reference_host_bandwidth_gbps": round(min(bandwidth["d2h_gbps"], bandwidth["h2d_gbps"]), 3)
    }
    contention: list[float] = []
    for strategy, chain in CHAINS.items():
        per_phase: dict[str, list[tuple[float, float]]] = {}
        for result in data["results"]:
            variants = {v["variant"]: v for v in result["variants"]}
            variant = variants.get(strategy)
            if variant is None:
                continue
            gb = _model_gb(result["num_params"], weight_bytes=weight_bytes)
            critical = _phase_points(variant, strategy, gb, critical=True)
            background = _phase_points(variant, strategy, gb, critical=False)
            for name in chain:
                per_phase.setdefault(name, []).extend(critical.get(name, []))
            for name in BACKGROUND[strategy]:
                if name in background:
                    per_phase.setdefault(name, []).extend(background[name])
                    bg_time = statistics.fmean(t for _, t in background[name])
                    bg_cost = [r["background_s"] for r in variant["resizes"]]
                    bg_cost = [b for b in bg_cost if b is not None]
                    if bg_cost and bg_time > 0:
                        contention.append(statistics.fmean(bg_cost) / bg_time)
        phases: dict[str, Any] = {}
        previous: str | None = None
        for name in chain:
            base, slope = _fit(per_phase.get(name, []))
            deps = [previous] if previous else []
            phases[name] = _phase_entry(strategy, name, base, slope, deps, True)
            previous = name
        for name, after in BACKGROUND[strategy].items():
            base, slope = _fit(per_phase.get(name, []))
            phases[name] = _phase_entry(strategy, name, base, slope, [after], False)
        out[strategy] = phases
    if contention:
        out["background_contention"] = round(min(max(statistics.fmean(contention), 0.0), 1.0), 4)
    return out


def _phase_entry(
    strategy: str, name: str, base: float, slope: float, deps: list[str], critical: bool
) -> dict:
    return {
        "base_s": round(base, 6),
        "s_per_gb": round(slope, 6),
        "moves": _moves(strategy, name),
        "link": "host",
        "critical": critical,
        "depends_on": deps,
        "share": "changed_owner" if name in RECUT[strategy] else "whole",
        "on_moves": ONE_DIRECTION[strategy].get(name, "any"),
    }


def write_preset(data: dict[str, Any], path: Path, *, weight_bytes: float | None = None) -> str:
    """Write the fitted preset to `path`; returns a short report of predicted vs measured."""
    from dynaresize.traces.phases import StrategyName
    from dynaresize.twin.costs import load_costs
    from dynaresize.twin.costs.memory import ModelConfig
    from dynaresize.twin.costs.resize import plan_resizes

    if weight_bytes is None:
        weight_bytes = 2.0 if data["meta"]["device"] == "cuda" else 4.0
    resize = fit_resize_params(data, weight_bytes=weight_bytes)
    meta = data["meta"]
    header = (
        f"# Resize cost model calibrated by benchmarks/bench_resize.py on {meta['device']}\n"
        f"# ({meta.get('host', '')}): {meta['command']}\n"
        "# Phases are fitted per strategy as base_s + s_per_gb * GB of the state they move;\n"
        "# phases a strategy does not run cost nothing.\n"
    )
    body = yaml.safe_dump({"cost_source": "calibrated", "resize": resize}, sort_keys=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + body)
    costs = load_costs(path)
    lines = [f"wrote {path}"]
    for result in data["results"]:
        model = ModelConfig(
            num_params_b=result["num_params"] / 1e9, weight_bytes_per_param=weight_bytes
        )
        variants = {v["variant"]: v for v in result["variants"]}
        for strategy in (StrategyName.OVERLAPPED, StrategyName.STOP_AND_REBUILD):
            variant = variants.get(strategy.value)
            if variant is None:
                continue
            plans = plan_resizes(
                strategy=strategy,
                model=model,
                params=costs.resize,
                host_bandwidth_gbps=resize["reference_host_bandwidth_gbps"],
                interconnect_bandwidth_gbps=costs.resize.reference_interconnect_bandwidth_gbps,
            )
            for measured in variant["resizes"]:
                plan = plans.between(*_move(measured))
                lines.append(
                    f"{result['model']} {strategy.value} {measured['from']} -> {measured['to']}: "
                    f"predicted critical {plan.critical_s:.3f} s, measured gap "
                    f"{measured['critical_s']:.3f} s"
                )
    return "\n".join(lines)
