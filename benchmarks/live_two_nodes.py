"""Two Ray nodes on this machine's loopback: a live CPU job whose policy moves devices across the
node boundary both ways, checked against a run without resizes.

    python benchmarks/live_two_nodes.py --out DIR [--quick] [--model tiny|small]
    python benchmarks/live_two_nodes.py --out DIR --address HOST:PORT   # a cluster already up

It starts a cluster of two nodes (a head and a second `ray start --address`, each with its own
loopback address, two CPUs, a custom resource `node_a` or `node_b`, its own temp and staging
folders: executor/loopback_cluster.py), runs the built-in `live_two_nodes` config (four workers,
two per node, overlapped resizes 2:2 -> 3:1 -> 2:2 ...: a trainer slice crosses from node_a to
node_b, then back), records its batches, trains on the very same batches without resizing, and
checks:
- lineage: every sample trained exactly once, at the expected weights versions;
- state: final master weights and AdamW moments of both runs agree as whole vectors, relative
  error below `STATE_RELATIVE_ERROR_BOUND` (1e-3, the bound the resize-semantics tests hold every
  strategy to; derived where it is defined): above any rounding a different split causes, far
  below a zeroed or stale moment or a lost update;
- the moves: every transfer's path, bytes and seconds (cross-node over gloo, same-node through
  shared memory), per path and per phase, and seconds per GB of each path from the same run;
- cleanup: no staging segment or pipe left in either node's folders, both nodes stopped.
It writes DIR/two_nodes.json (and the two runs' folders under DIR) and exits 0 when every check
holds, 1 when one fails, 2 on bad input. With --address it joins that cluster (the environment
must carry its RAY_AUTH_TOKEN) and stops nothing; per-node leftovers are then not counted.
`--quick` (what CI runs): the tiny model, four steps, one move each way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

SMALL_MODEL = {
    "model_type": "qwen2",
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "max_position_embeddings": 512,
    "tie_word_embeddings": True,
}
"""About 27 M parameters: 0.1 GB of fp32 master weights, so a move is large enough to time."""

NODES = [("node_a", 2), ("node_b", 2)]

STATE_KEYS = ("master", "exp_avg", "exp_avg_sq")
STATE_RELATIVE_ERROR_BOUND = 1e-3
"""Largest |a - b| / |b| (2-norms of whole vectors) by which the resized run's master weights or
AdamW moments may differ from the run without resizes: the bound of
tests/executor/test_resize_semantics.py.

Rounding stays far below it. The two runs train on the same batches, but each step's gradient
is summed over a different split (2 or 3 trainers, micro-batches of another composition, then
the all-reduce), so the same fp32 numbers are added in another order and each sum differs by a
few units of roundoff (2^-24, about 6e-8) relative to the terms added. AdamW carries such
differences forward without damping them, and over K steps they add up at most linearly: the
whole-vector error stays near K x 1e-7 (5e-8 to 2e-7 after 8 AdamW steps on gradients summed
whole and in three parts). An element-wise atol cannot say this: entries near zero (most of
exp_avg_sq, weights crossing zero) differ by more than 1e-6 at that same rounding (1.25e-6 in
one run), while relative to the vector the difference is about 1e-6 or less.

A real loss stays far above it: a zeroed moment is off by exactly 1; exp_avg one step stale by
(1 - beta1) |g_k - m_(k-1)| / |m_k|, about 0.1 to 0.5; exp_avg_sq one step stale by about
1 / (k + 1) after k + 1 steps (at least 0.1 for these runs of 8 steps at most; it would reach
1e-3 only near 1 / (1 - beta2) = 1000 steps); master weights missing one update by about
lr x |update| / |w| (0.02 at lr 1e-3 in the same 8-step run)."""


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    out = Path(args.out)
    cluster = None
    try:
        if args.address is None:
            from dynaresize.executor.testing.loopback_cluster import LoopbackCluster

            cluster = LoopbackCluster.of(NODES)
            os.environ.update(cluster.driver_env())  # before this process first starts Ray
            address = cluster.start()
            print(f"two nodes up at {address} in {cluster.root}")
        else:
            address = args.address
        report = run_check(args, out, address=address, cluster=cluster)
    except ValueError as err:  # ConfigError and PlacementError are ValueErrors: bad input
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        if cluster is not None:
            cluster.stop()
    if cluster is not None:
        report["nodes_stopped"] = not cluster.process_groups_alive()
    out.mkdir(parents=True, exist_ok=True)
    (out / "two_nodes.json").write_text(json.dumps(report, indent=2))
    _print_summary(report)
    return 0 if report["ok"] and report.get("nodes_stopped", True) else 1


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="Folder for two_nodes.json and the runs.")
    parser.add_argument("--quick", action="store_true", help="Tiny model, four steps (CI).")
    parser.add_argument(
        "--model",
        choices=["tiny", "small"],
        default=None,
        help="tiny (the default with --quick) or small (27 M parameters).",
    )
    parser.add_argument(
        "--address", default=None, help="Join this cluster instead of starting one."
    )
    return parser.parse_args(argv)


def job_config(*, quick: bool, model: str) -> Any:
    """The built-in `live_two_nodes` run config, shortened for --quick, with the chosen model."""
    from dynaresize.config import load_run_config

    if quick:
        num_steps, schedule = 4, [("0", "3:1"), ("2", "2:2")]
    else:
        num_steps = 8
        schedule = [("1", "3:1"), ("3", "2:2"), ("5", "3:1"), ("6", "2:2")]
    live: dict[str, Any] = {
        "record_batches": True,
        "policy": {
            "kind": "scheduled",
            "schedule": [{"step": int(s), "allocation": a} for s, a in schedule],
        },
    }
    if model == "small":
        live["model"] = {"preset": None, "config": SMALL_MODEL}
        live["staging"] = {"chunk_mib": 16}
    return load_run_config(
        "live_two_nodes", overrides={"simulation": {"num_steps": num_steps}, "live": live}
    )


def run_check(args: argparse.Namespace, out: Path, *, address: str, cluster: Any) -> dict:
    """Both runs, then every check; the report (two_nodes.json's content)."""
    from dynaresize.executor.driver import run_live

    model = args.model or ("tiny" if args.quick else "small")
    run_config = job_config(quick=args.quick, model=model)
    live = run_config.live
    started = time.perf_counter()
    resized_out, static_out = out / "resized", out / "no_resize"
    resized = run_live(run_config, address=address, out_dir=resized_out)
    resized_s = time.perf_counter() - started
    static_live = type(live).model_validate(
        live.model_dump(mode="json")
        | {
            "pipeline": "sync",  # the training side sees the same batches in either mode
            "policy": {"kind": "static"},
            "replay_batches_from": str(resized_out / "batches"),
            "record_batches": False,
            "checkpoint_every_steps": live.num_steps,
        }
    )
    run_live(static_live, address=address, out_dir=static_out)
    report: dict[str, Any] = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "model": model,
        "num_steps": live.num_steps,
        "resizes": resized.num_resizes,
        "resized_run_s": round(resized_s, 2),
        "address": address,
        "cpus": os.cpu_count(),
        "load_average_1m_at_end": os.getloadavg()[0],
    }
    report |= _lineage(resized_out, live)
    report |= _state(resized_out, static_out)
    report |= _moves(resized_out, address, [slot.resource for slot in live.placement.nodes])
    if cluster is not None:
        left = cluster.staging_entries()
        report["staging_entries_left"] = {node: len(names) for node, names in left.items()}
    report["ok"] = bool(
        report["lineage_ok"]
        and report["state_matches_no_resize_run"]
        and report["cross_node_moves"]["node_a->node_b"] > 0
        and report["cross_node_moves"]["node_b->node_a"] > 0
        and not any(report.get("staging_entries_left", {}).values())
    )
    return report


def _lineage(out: Path, live: Any) -> dict[str, Any]:
    from dynaresize.executor.run_folder.lineage import LineageError, check_lineage

    try:
        summary = check_lineage(out, live)
    except LineageError as err:
        return {"lineage_ok": False, "lineage_error": str(err)}
    return {"lineage_ok": True, "lineage_samples": summary.num_samples}


def _state(resized_out: Path, static_out: Path) -> dict[str, Any]:
    from dynaresize.executor.run_folder import checkpoint as ckpt

    resized, static = ckpt.load(resized_out), ckpt.load(static_out)
    report = compare_states(resized.vectors, static.vectors)
    report["state_steps"] = [resized.next_step, static.next_step]
    if resized.next_step != static.next_step:
        report["state_matches_no_resize_run"] = False
    return report


def relative_error(a: Any, b: Any) -> float:
    """|a - b| / |b| over the whole vector (2-norms)."""
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def compare_states(resized: dict[str, Any], static: dict[str, Any]) -> dict[str, Any]:
    """Whether the trainer states (master weights and both AdamW moments, full vectors) agree
    within `STATE_RELATIVE_ERROR_BOUND`, with each vector's relative error and largest
    element difference (the latter reported, not judged)."""
    errors = {key: relative_error(resized[key], static[key]) for key in STATE_KEYS}
    return {
        "state_matches_no_resize_run": all(e < STATE_RELATIVE_ERROR_BOUND for e in errors.values()),
        "state_relative_error": errors,
        "state_relative_error_bound": STATE_RELATIVE_ERROR_BOUND,
        "state_max_abs_diff": {
            key: float((resized[key] - static[key]).abs().max()) for key in STATE_KEYS
        },
    }


def _moves(out: Path, address: str, slot_names: list[str]) -> dict[str, Any]:
    """Where every worker lived, and every transfer by path, phase and direction."""
    from dynaresize.traces.io import read_trace
    from dynaresize.traces.transfers import TransferRecord, totals_by_path, transfers_frame

    infos = json.loads((out / "workers.json").read_text())
    name_of_node = _node_names(address, slot_names)
    nodes: dict[str, dict[str, Any]] = {}
    for info in infos:
        entry = nodes.setdefault(
            name_of_node.get(info["node_id"], info["node_id"]),
            {"node_id": info["node_id"], "ip": info["node_ip"], "workers": []},
        )
        entry["workers"].append(info["worker_id"])
    frame = transfers_frame(read_trace(out / "trace").extras)
    records = [
        TransferRecord.model_validate({k: v for k, v in row.items() if k != "step"})
        for row in frame.to_dict("records")
    ]
    directions: dict[str, int] = {"node_a->node_b": 0, "node_b->node_a": 0}
    for r in records:
        if r.cross_node:
            src, dst = (name_of_node.get(n, n) for n in (r.src_node, r.dst_node))
            key = f"{src}->{dst}"
            directions[key] = directions.get(key, 0) + 1
    by_phase = {
        phase: totals_by_path(r for r in records if r.phase.value == phase)
        for phase in sorted({r.phase.value for r in records})
    }
    paths = totals_by_path(records)
    shm, network = paths.get("shm", {}), paths.get("network", {})
    ratio = None
    if shm.get("seconds_per_gb") and network.get("seconds_per_gb"):
        ratio = network["seconds_per_gb"] / shm["seconds_per_gb"]
    return {
        "nodes": nodes,
        "cross_node_moves": {"total": sum(directions.values()), **directions},
        "paths": paths,
        "paths_by_phase": by_phase,
        "network_over_shm_seconds_per_gb": ratio,
        "transfers": [r.model_dump(mode="json") for r in records],
    }


def _node_names(address: str, slot_names: list[str]) -> dict[str, str]:
    """Each node's name: the placement slot resource it holds (asked of the cluster itself)."""
    import ray

    ray.init(address=address, log_to_driver=False)
    try:
        alive = [n for n in ray.nodes() if n.get("Alive")]
    finally:
        ray.shutdown()
    names = {}
    for node in alive:
        held = [name for name in slot_names if node["Resources"].get(name, 0) > 0]
        if held:
            names[node["NodeID"]] = held[0]
    return names


def _print_summary(report: dict[str, Any]) -> None:
    placed = [f"{name} workers {entry['workers']}" for name, entry in report["nodes"].items()]
    print(f"nodes: {', '.join(placed)}")
    print(f"cross-node moves: {report['cross_node_moves']}")
    errors = ", ".join(f"{k} {v:.1e}" for k, v in report["state_relative_error"].items())
    print(
        f"lineage ok: {report['lineage_ok']}; state matches the run without resizes: "
        f"{report['state_matches_no_resize_run']} (relative error {errors}; bound "
        f"{report['state_relative_error_bound']:g})"
    )
    for path, totals in report["paths"].items():
        gb = totals["bytes"] / 1e9
        per_gb = totals["seconds_per_gb"]
        print(
            f"  {path:8s} {int(totals['transfers']):3d} transfers {gb * 1e3:9.2f} MB "
            f"{totals['seconds']:8.3f} s  " + (f"{per_gb:8.2f} s/GB" if per_gb else "")
        )
    if report["network_over_shm_seconds_per_gb"]:
        print(f"network / shm time per GB: {report['network_over_shm_seconds_per_gb']:.2f}")
    if "staging_entries_left" in report:
        print(f"staging entries left per node: {report['staging_entries_left']}")
    if "nodes_stopped" in report:
        print(f"nodes stopped: {report['nodes_stopped']}")
    print("all checks hold" if report["ok"] else "a check failed")


if __name__ == "__main__":
    sys.exit(main())
