"""The point-to-point wires with CUDA tensors (skipped without CUDA).

- one GPU: two processes share it; the gloo wire moves their CUDA tensors through host buffers
  (the network path of a run whose workers share GPUs), bit for bit;
- two GPUs: the NCCL wire moves a slice from one GPU to the other with no host copy (the device
  path, and the network path of a run with a GPU per worker), bit for bit, NVLink multicast off.

    python -m pytest -q tests/executor/test_staging_device_gpu.py   # on a machine with CUDA
"""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest
import torch

pytestmark = pytest.mark.gpu

CHUNK_BYTES = 1 << 20


def _state(device: torch.device) -> dict[str, torch.Tensor]:
    """Sizes off the chunk grid: some chunks are one run of one tensor (sent as they are), one
    spans two tensors (packed in a buffer)."""
    gen = torch.Generator().manual_seed(3)
    cpu = {
        "master": torch.randn(700_001, generator=gen),
        "exp_avg": torch.randn(300_003, generator=gen),
        "exp_avg_sq": torch.rand(300_003, generator=gen),
    }
    return {k: v.to(device) for k, v in cpu.items()}


def _run(rank: int, init_file: str, use_nccl: bool, queue) -> None:
    import torch.distributed as dist

    from dynaresize.executor.staging import StagingConfig
    from dynaresize.executor.staging.device import nccl_wire
    from dynaresize.executor.staging.network import PointToPoint, Wire

    device = torch.device("cuda", rank if use_nccl else 0)
    torch.cuda.set_device(device)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    config = StagingConfig(chunk_bytes=CHUNK_BYTES, num_buffers=2, peer_timeout_s=120)
    control = dist.new_group([0, 1], backend="gloo")
    if use_nccl:
        wire = nccl_wire(world_size=2, device=device, timeout_s=120)
    else:
        wire = Wire(group=control, device=torch.device("cpu"))
    end = PointToPoint(config, control=control, data=wire)
    state = _state(device)
    report: dict = {"rank": rank, "nvls": os.environ.get("NCCL_NVLS_ENABLE")}
    if rank == 0:
        stats = end.send(1, state, transfer_id=1)
    else:
        into = {k: torch.zeros_like(v) for k, v in state.items()}
        stats = end.receive_into(0, into, transfer_id=1)
        report["exact"] = all(torch.equal(into[k], state[k]) for k in state)
    report |= {"bytes": stats.num_bytes, "seconds": stats.seconds, "held": end.buffer_bytes}
    queue.put(report)
    dist.destroy_process_group()


def _both(tmp_path, use_nccl: bool) -> list[dict]:
    ctx = mp.get_context("spawn")  # CUDA cannot be used in a forked child
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_run, args=(r, str(tmp_path / "init"), use_nccl, queue))
        for r in range(2)
    ]
    for p in procs:
        p.start()
    reports = sorted((queue.get(timeout=300) for _ in procs), key=lambda r: r["rank"])
    for p in procs:
        p.join(timeout=60)
    return reports


def test_the_gloo_wire_moves_cuda_tensors_through_bounded_host_buffers(tmp_path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    sender, receiver = _both(tmp_path, use_nccl=False)
    assert receiver["exact"]
    # CUDA tensors never go on the gloo wire directly: every chunk went through a host buffer
    assert 0 < sender["held"] <= 2 * CHUNK_BYTES and 0 < receiver["held"] <= 2 * CHUNK_BYTES
    print(f"gloo, host buffers: {receiver['bytes'] / 1e9:.3f} GB in {receiver['seconds']:.3f} s")


def test_the_nccl_wire_moves_a_slice_gpu_to_gpu(tmp_path) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs (NCCL cannot join two ranks on one)")
    sender, receiver = _both(tmp_path, use_nccl=True)
    assert receiver["exact"]
    assert sender["nvls"] == receiver["nvls"] == "0"
    # only the chunk that spans two tensors went through a (device) buffer
    assert receiver["held"] <= 2 * CHUNK_BYTES
    print(f"NCCL, GPU to GPU: {receiver['bytes'] / 1e9:.3f} GB in {receiver['seconds']:.3f} s")
