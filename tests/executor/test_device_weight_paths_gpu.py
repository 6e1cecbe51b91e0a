"""A weight sync on one GPU where one replica cannot map the first trainer's device buffer:
the replicas that can load from it, the other gets the network path, in the same sync, every
replica ends with the trainer's exact weights, and the refused replica is not tried again at
the next syncs. Needs CUDA; skipped elsewhere (tests/executor/test_sync_paths.py checks the
decision on CPU).

    python -m pytest -q tests/executor/test_device_weight_paths_gpu.py   # on a machine with CUDA

Four processes (tests/executor/device_sync_member.py) join one gloo group: the trainer and two
replicas on the GPU, and one replica started with CUDA_VISIBLE_DEVICES empty, which cannot see
the trainer's device (as a replica on another node cannot).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
MEMBER = ROOT / "tests" / "executor" / "device_sync_member.py"
WORLD = 4
REFUSED = 3
NUM_VERSIONS = 3


@pytest.fixture(scope="module")
def members(tmp_path_factory) -> dict[int, dict]:
    folder = tmp_path_factory.mktemp("device_sync")
    store = folder / "store"
    processes = []
    for rank in range(WORLD):
        paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        if rank == REFUSED:
            env["CUDA_VISIBLE_DEVICES"] = ""
        args = [sys.executable, str(MEMBER), str(rank), str(WORLD), str(store)]
        processes.append(subprocess.Popen([*args, str(folder / f"{rank}.json")], env=env, cwd=ROOT))
    try:
        codes = [p.wait(timeout=300) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert codes == [0] * WORLD
    return {r: json.loads((folder / f"{r}.json").read_text()) for r in range(WORLD)}


def test_each_replica_takes_its_own_path_in_the_same_sync(members) -> None:
    assert [members[r]["sees_cuda"] for r in range(WORLD)] == [True, True, True, False]
    for v in range(NUM_VERSIONS):
        paths = {r: members[r]["versions"][v]["result"].get("path") for r in range(1, WORLD)}
        assert paths == {1: "cuda_ipc", 2: "cuda_ipc", 3: "network"}
        assert members[0]["versions"][v]["result"]["source"] is True


def test_every_replica_holds_the_trainers_exact_weights_at_every_version(members) -> None:
    for v in range(NUM_VERSIONS):
        sent = members[0]["versions"][v]["sha256"]
        digests = {members[r]["versions"][v]["result"]["digest"] for r in range(WORLD)}
        assert len(digests) == 1  # what each engine loaded is what the trainer published
        assert all(members[r]["versions"][v]["sha256"] == sent for r in range(1, WORLD))
    assert len({members[0]["versions"][v]["sha256"] for v in range(NUM_VERSIONS)}) == 3


def test_a_replica_maps_the_buffer_once_and_a_refused_one_is_not_tried_again(members) -> None:
    assert [members[r]["attempts"] for r in range(WORLD)] == [0, 1, 1, 1]
