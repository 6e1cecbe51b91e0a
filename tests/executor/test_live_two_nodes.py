"""Live across nodes, on two Ray nodes of this machine's loopback (executor/loopback_cluster.py).

- The short version of benchmarks/live_two_nodes.py: a live CPU job whose policy moves a trainer
  slice from node_a to node_b and back; lineage and final state equal those of a run without
  resizes; every transfer between the nodes went over the network, every other one through
  shared memory, and their bytes are what the re-cut plan moves.
- A worker of node_b killed in the middle of a move: the same clean stop, fault.json and
  `--resume` as on one node (tests/executor/test_live_faults.py).
- No staging segment or pipe is left in either node's folders after either.
- While the first runs, no worker listens on every interface beyond its Ray core worker's gRPC
  server: the world group's TCP store listens on the first worker's node address only.
- Bad input (an --address that does not answer, a cluster that answers callers without Ray's
  token, fewer CPUs in the cluster than the config asks, a node slot the cluster cannot hold):
  one error line, exit code 2, no run folder.

Drivers run in processes of their own: a driver's Ray authentication is fixed for its process's
lifetime, and this test process may already have started a local Ray.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.live, pytest.mark.timeout(3000)]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "dynaresize" / "configs" / "live_two_nodes.yaml"


@pytest.fixture(scope="module")
def two_nodes():
    from dynaresize.executor.testing.loopback_cluster import LoopbackCluster

    cluster = LoopbackCluster.of([("node_a", 2), ("node_b", 2)])
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
    assert not cluster.process_groups_alive(), "a node's processes outlived stop()"


def _driver(
    cluster, args: list[str], timeout_s: float, *, while_running: Callable[[], None] | None = None
) -> subprocess.CompletedProcess:
    """Run a driver script to its end; `while_running` is called about twice a second meanwhile."""
    # a script's own folder comes first on its path: the driver imports this checkout, as the
    # workers (started from ROOT) do, not an installed copy
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = os.environ | {"PYTHONPATH": path} | (cluster.driver_env() if cluster is not None else {})
    command = [sys.executable, *args]
    if while_running is None:
        return subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=stdout, stderr=stderr)
        deadline = time.monotonic() + timeout_s
        try:
            while process.poll() is None:
                assert time.monotonic() < deadline, f"{args[0]} ran over {timeout_s} s"
                while_running()
                time.sleep(0.5)  # sampling the run's sockets, not standing in for work
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        stdout.seek(0)
        stderr.seek(0)
        return subprocess.CompletedProcess(
            command, process.returncode, stdout.read(), stderr.read()
        )


WILDCARD_ADDRESSES = {"0.0.0.0", "::"}


class WorkerListeners:
    """The listening sockets of the live workers of the cluster's nodes, sampled during a run."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.by_worker: dict[int, set[str]] = {}

    def __call__(self) -> None:
        import psutil

        procs = []
        for pid in self.cluster.node_pids():
            try:
                procs += psutil.Process(pid).children(recursive=True)
            except psutil.Error:
                continue
        for proc in procs:
            try:
                if "LiveWorker" not in " ".join(proc.cmdline()):
                    continue
                conns = proc.net_connections(kind="inet")
            except psutil.Error:
                continue
            found = self.by_worker.setdefault(proc.pid, set())
            found.update(
                f"{c.laddr.ip}:{c.laddr.port}" for c in conns if c.status == psutil.CONN_LISTEN
            )

    def wildcard(self) -> dict[int, list[str]]:
        """Each worker's listeners on every interface."""
        return {
            pid: sorted(a for a in found if a.rsplit(":", 1)[0] in WILDCARD_ADDRESSES)
            for pid, found in self.by_worker.items()
        }


def _nothing_staged(cluster) -> None:
    assert cluster.staging_entries() == {"node_a": [], "node_b": []}


def test_moves_cross_the_node_boundary_both_ways_and_match_a_run_without_resizes(
    two_nodes, tmp_path
) -> None:
    _nothing_staged(two_nodes)
    out = tmp_path / "bed"
    args = ["benchmarks/live_two_nodes.py", "--out", str(out), "--quick"]
    listeners = WorkerListeners(two_nodes)
    done = _driver(
        two_nodes,
        [*args, "--address", str(two_nodes.address)],
        timeout_s=1500,
        while_running=listeners,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads((out / "two_nodes.json").read_text())
    # the world group's store listens on the first worker's node address only: on every
    # interface a worker has only its Ray core worker's gRPC server (Ray 2.60 cannot bind it)
    assert len(listeners.by_worker) >= 4, listeners.by_worker
    wide = {pid: found for pid, found in listeners.wildcard().items() if len(found) > 1}
    assert not wide, f"workers listening on every interface beyond Ray's server: {wide}"

    nodes = report["nodes"]
    assert {n: v["workers"] for n, v in nodes.items()} == {"node_a": [0, 1], "node_b": [2, 3]}
    assert nodes["node_a"]["node_id"] != nodes["node_b"]["node_id"]
    assert nodes["node_a"]["ip"] != nodes["node_b"]["ip"]
    moves = report["cross_node_moves"]
    assert moves["node_a->node_b"] >= 1 and moves["node_b->node_a"] >= 1
    assert report["lineage_ok"] and report["state_matches_no_resize_run"], report

    transfers = report["transfers"]
    for t in transfers:  # the path follows from the nodes alone
        assert (t["path"] == "network") == (t["src_node"] != t["dst_node"]), t
    assert report["paths"]["shm"]["bytes"] > 0 and report["paths"]["network"]["bytes"] > 0
    _transfers_are_the_recut_plan(transfers, out / "resized")
    _nothing_staged(two_nodes)


def _transfers_are_the_recut_plan(transfers: list[dict], run: Path) -> None:
    """Every resize's recorded transfers are the plan's moves between workers, byte for byte."""
    from dynaresize.executor.roles import RoleMap
    from dynaresize.executor.worker.slice_moves import reshard_moves
    from dynaresize.policies.types import Allocation
    from dynaresize.traces.io import read_trace

    trace = read_trace(run / "trace")
    numel = _numel_of_tiny()
    for resize_id, phases in trace.resizes.groupby("resize_id"):
        first = phases.iloc[0]
        old = RoleMap.for_allocation(Allocation.parse(first.from_allocation))
        new = RoleMap.for_allocation(Allocation.parse(first.to_allocation))
        planned = sorted(
            (m.src_worker, m.dst_worker, 4 * m.numel)
            for m in reshard_moves(old, new, numel=numel)
            if not m.local
        )
        for phase, per_element in (("weight_restore", 1), ("optimizer_restore", 2)):
            got = sorted(
                (t["src_worker"], t["dst_worker"], t["num_bytes"])
                for t in transfers
                if t["resize_id"] == resize_id and t["phase"] == phase
            )
            assert got == [(s, d, b * per_element) for s, d, b in planned], (resize_id, phase)


def _numel_of_tiny() -> int:
    from dynaresize.executor.rl.model import build_model
    from dynaresize.executor.rl.model_spec import ModelSpec

    return sum(p.numel() for p in build_model(ModelSpec(preset="tiny")).parameters())


def test_a_worker_killed_on_the_second_node_mid_move_stops_cleanly_and_resume_completes(
    two_nodes, tmp_path
) -> None:
    out = tmp_path / "fault"
    args = ["tests/executor/two_node_fault_job.py", "--address", str(two_nodes.address)]
    done = _driver(two_nodes, [*args, "--out", str(out)], timeout_s=1500)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads((out / "fault_report.json").read_text())

    error, killed = report["error"], report["killed"]
    assert error is not None and error["type"] == "WorkerLostError", report
    # worker 2 became a trainer in the resize it died in
    assert (error["worker_id"], error["role"], error["step"]) == (2, "train", killed["step"])
    assert error["doing"] == "moving master slices"
    fault = report["fault"]
    assert (fault["worker_id"], fault["role"], fault["step"]) == (2, "train", error["step"])
    # the resize followed step 1: steps 0 and 1 are recorded once each, and the checkpoint
    # (taken after step 0) resumes at step 1
    assert report["crashed_steps"] == [0, 1]
    assert report["checkpoint_next_step"] == error["step"] == 1
    assert report["steps"] == [0, 1, 2, 3]  # none repeated, none missing after the resume
    assert report["lineage_samples"] == report["samples_expected"]
    assert not report["fault_file_left"]
    _nothing_staged(two_nodes)


def _bad_config(tmp_path: Path, live_update: dict) -> Path:
    data = yaml.safe_load(CONFIG.read_text())
    data["live"] |= live_update
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _one_error_line(done: subprocess.CompletedProcess, *, expected: str) -> None:
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0], done.stderr
    assert "Traceback" not in done.stderr


def test_an_address_that_does_not_answer_is_refused_with_one_line(tmp_path) -> None:
    from dynaresize.executor.ports import free_port

    out = tmp_path / "run"
    address = f"127.0.0.1:{free_port()}"
    args = ["-m", "dynaresize.cli", "run", "--mode", "live", "--config", str(CONFIG)]
    done = _driver(None, [*args, "--address", address, "--out", str(out)], timeout_s=300)
    _one_error_line(done, expected=f"--address {address}: no Ray cluster answers there")
    assert not out.exists()


def test_a_cluster_that_answers_without_a_token_is_refused_with_one_line(tmp_path) -> None:
    """The driver has its token settings right; the cluster's nodes run with authentication
    off, so they would answer anyone: the run must not join it."""
    from dynaresize.executor.testing.loopback_cluster import LoopbackCluster

    out = tmp_path / "run"
    args = ["-m", "dynaresize.cli", "run", "--mode", "live", "--config", str(CONFIG)]
    with LoopbackCluster.of([("node_a", 1)], node_auth_mode="disabled") as open_cluster:
        address = str(open_cluster.address)
        done = _driver(open_cluster, [*args, "--address", address, "--out", str(out)], 300)
    _one_error_line(done, expected=f"--address {address}: the cluster does not require Ray's")
    assert not out.exists()


@pytest.mark.parametrize(
    "live_update, expected",
    [
        ({"cpus_per_worker": 2}, "need 8 CPUs; the cluster (2 nodes) has 4"),
        (
            {
                "placement": {
                    "nodes": [
                        {"resource": "node_a", "num_workers": 3},
                        {"resource": "node_b", "num_workers": 1},
                    ]
                }
            },
            "the node with 'node_a' holds 2 workers (2 CPU), the slot asks 3",
        ),
    ],
    ids=["fewer_cpus_than_asked", "slot_the_node_cannot_hold"],
)
def test_a_run_the_cluster_cannot_hold_is_refused_before_any_worker_starts(
    two_nodes, tmp_path, live_update, expected
) -> None:
    out = tmp_path / "run"
    config = _bad_config(tmp_path, live_update)
    args = ["-m", "dynaresize.cli", "run", "--mode", "live", "--config", str(config)]
    done = _driver(two_nodes, [*args, "--address", str(two_nodes.address), "--out", str(out)], 600)
    _one_error_line(done, expected=expected)
    assert not out.exists()
