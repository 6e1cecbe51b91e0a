"""A Ray cluster of several nodes on this machine's loopback: multi-node runs, anywhere.

Each node is a `ray start --block` process of its own, as on separate machines:
- its own loopback address (127.0.0.2, 127.0.0.3, ...: Linux routes all of 127.0.0.0/8 to the
  loopback interface, and Ray would rewrite 127.0.0.1 itself to the machine's public address);
- its own resources: a few CPUs and a custom resource named after the node, which
  `live.placement.nodes` pins workers to;
- its own Ray temp folder, and its own staging folders (TMPDIR and DYNARESIZE_SHM_DIR, the
  latter under /dev/shm), so that what one node leaves in shared memory is invisible to the
  other and can be counted per node;
- its own free ports for every Ray server, so that several clusters (other people's too) live
  side by side on one machine.
A fresh token authenticates the nodes and the drivers (`driver_env()` is what a driver process
needs in its environment before it first starts Ray). `stop()` sends SIGTERM to each
`ray start`, which drains its node and stops the processes it started, then kills what is left
of that node's process group: only processes this object started.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..ports import EVERY_INTERFACE, free_port

STAGING_PREFIX = "dynaresize-stage-"
READY_LINE = "Ray runtime started."
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0


class LoopbackClusterError(RuntimeError):
    """A node did not start (its log's tail says why)."""


@dataclass(frozen=True)
class LoopbackNode:
    """One node: its name (also its custom resource), address, CPUs and worker slots."""

    name: str
    ip: str
    num_cpus: int
    slots: int
    """Units of the node's custom resource (workers that can be pinned to it)."""


@dataclass
class _Started:
    node: LoopbackNode
    process: subprocess.Popen
    log_path: Path
    tmp_dir: Path
    shm_dir: Path


@dataclass
class LoopbackCluster:
    """Start with `start()` (or `with`), stop with `stop()`; `address` is the head's."""

    nodes: list[LoopbackNode]
    object_store_mb: int = 256
    root: Path | None = None
    token: str = field(default_factory=lambda: secrets.token_hex(32))
    node_auth_mode: str = "token"
    """`RAY_AUTH_MODE` of the nodes: `disabled` starts a cluster that accepts any caller, which a
    live run must refuse to join."""
    _started: list[_Started] = field(default_factory=list)
    _made_root: bool = False
    _process_groups: list[int] = field(default_factory=list)
    address: str | None = None

    @classmethod
    def of(cls, names_and_slots: list[tuple[str, int]], **kwargs) -> LoopbackCluster:
        """Nodes 127.0.0.2, 127.0.0.3, ...: each with as many CPUs as worker slots."""
        nodes = [
            LoopbackNode(name=name, ip=f"127.0.0.{i + 2}", num_cpus=slots, slots=slots)
            for i, (name, slots) in enumerate(names_and_slots)
        ]
        return cls(nodes=nodes, **kwargs)

    # --- start and stop ---------------------------------------------------------------

    def __enter__(self) -> LoopbackCluster:
        self.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.stop()

    def driver_env(self) -> dict[str, str]:
        """What a driver's environment needs to join the cluster (before it first starts Ray)."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Start the head, then every other node; returns the head's address."""
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="drn-", dir="/tmp"))
            self._made_root = True
        try:
            head, *others = self.nodes
            port = free_port(EVERY_INTERFACE)
            self.address = f"{head.ip}:{port}"
            self._launch(head, ["--head", f"--port={port}", "--include-dashboard=false"])
            self._wait_ready(self._started[0], timeout_s)
            for node in others:
                self._launch(node, [f"--address={self.address}"])
            for started in self._started[1:]:
                self._wait_ready(started, timeout_s)
            self._wait_for_nodes(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self.address

    def _launch(self, node: LoopbackNode, role_args: list[str]) -> None:
        assert self.root is not None
        base = self.root / node.name
        tmp_dir, ray_dir = base / "tmp", base / "ray"
        for folder in (tmp_dir, ray_dir):
            folder.mkdir(parents=True)
        shm_root = Path("/dev/shm") if Path("/dev/shm").is_dir() else base
        shm_dir = Path(tempfile.mkdtemp(prefix=f"drn-{node.name}-", dir=shm_root))
        env = (
            os.environ
            | self.driver_env()
            | {
                "RAY_AUTH_MODE": self.node_auth_mode,
                "TMPDIR": str(tmp_dir),
                "DYNARESIZE_SHM_DIR": str(shm_dir),
                "RAY_USAGE_STATS_ENABLED": "0",
            }
        )
        args = [
            str(Path(sys.executable).with_name("ray")),
            "start",
            "--block",
            *role_args,
            f"--node-ip-address={node.ip}",
            f"--num-cpus={node.num_cpus}",
            "--num-gpus=0",
            f'--resources={{"{node.name}": {node.slots}}}',
            f"--temp-dir={ray_dir}",
            f"--object-store-memory={self.object_store_mb * 1024 * 1024}",
            f"--node-manager-port={free_port(EVERY_INTERFACE)}",
            f"--object-manager-port={free_port(EVERY_INTERFACE)}",
            f"--metrics-export-port={free_port(EVERY_INTERFACE)}",
            f"--dashboard-agent-listen-port={free_port(EVERY_INTERFACE)}",
            f"--dashboard-agent-grpc-port={free_port(EVERY_INTERFACE)}",
            f"--runtime-env-agent-port={free_port(EVERY_INTERFACE)}",
            "--disable-usage-stats",
        ]
        log_path = base / "ray_start.log"
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._started.append(_Started(node, process, log_path, tmp_dir, shm_dir))
        self._process_groups.append(process.pid)

    def _wait_ready(self, started: _Started, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if READY_LINE in started.log_path.read_text(errors="replace"):
                return
            if started.process.poll() is not None:
                break
            time.sleep(0.2)  # polling a child's log for its start, not standing in for work
        tail = started.log_path.read_text(errors="replace").strip().splitlines()[-5:]
        raise LoopbackClusterError(
            f"node {started.node.name} did not start within {timeout_s:g} s: " + " | ".join(tail)
        )

    def _wait_for_nodes(self, timeout_s: float) -> None:
        """Until every node is alive in the cluster, asked from a fresh process (a driver's
        authentication is fixed for its process's lifetime, so this one does not join)."""
        code = (
            "import ray, sys, time\n"
            "ray.init(address=sys.argv[1], log_to_driver=False)\n"
            "deadline = time.monotonic() + float(sys.argv[3])\n"
            "while time.monotonic() < deadline:\n"
            "    if sum(n['Alive'] for n in ray.nodes()) >= int(sys.argv[2]): sys.exit(0)\n"
            "    time.sleep(0.2)\n"
            "sys.exit(1)\n"
        )
        args = [sys.executable, "-c", code, str(self.address), str(len(self.nodes)), str(timeout_s)]
        done = subprocess.run(
            args,
            env=os.environ | self.driver_env(),
            capture_output=True,
            text=True,
            timeout=timeout_s + 60,
            check=False,
        )
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise LoopbackClusterError(
                f"the cluster did not show {len(self.nodes)} nodes: " + " | ".join(tail)
            )

    def stop(self) -> None:
        """Stop every node this object started and remove its folders (shared-memory ones
        included). Safe to call twice."""
        for started in reversed(self._started):
            with contextlib.suppress(ProcessLookupError):
                started.process.send_signal(signal.SIGTERM)
        for started in reversed(self._started):
            try:
                started.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                started.process.kill()
                started.process.wait(timeout=STOP_TIMEOUT_S)
            # whatever the node's processes left behind in its own process group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(started.process.pid, signal.SIGKILL)
        for started in self._started:
            shutil.rmtree(started.shm_dir, ignore_errors=True)
        self._started.clear()
        if self._made_root and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self._made_root = False

    # --- what the nodes hold ----------------------------------------------------------

    def staging_entries(self) -> dict[str, list[str]]:
        """Staging segments, pipes and grants in each node's folders, by node name."""
        found: dict[str, list[str]] = {}
        for started in self._started:
            names: list[str] = []
            for folder in (started.tmp_dir, started.shm_dir):
                with contextlib.suppress(OSError):
                    names += [n for n in os.listdir(folder) if n.startswith(STAGING_PREFIX)]
            found[started.node.name] = sorted(names)
        return found

    def node_of_ip(self) -> dict[str, str]:
        """Node name by address (workers report their node's address)."""
        return {node.ip: node.name for node in self.nodes}

    def node_pids(self) -> list[int]:
        """Process ids of the nodes' `ray start` processes (every process of a node descends
        from its own)."""
        return [started.process.pid for started in self._started]

    def process_groups_alive(self) -> list[int]:
        """Process groups of the nodes this object started (running or stopped) that still
        have a live process: none after `stop()`."""
        alive = []
        for pgid in self._process_groups:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            alive.append(pgid)
        return alive
