"""Point-to-point staged transfers (the path between nodes, and GPU to GPU on NCCL) on gloo:
bytes arrive bit for bit through bounded buffers, a layout mismatch fails both sides before any
state moves, a dead peer fails the wait at once and a silent one times out; and the path of
every move follows from the nodes alone.

The NCCL wire runs the same `PointToPoint` code with its tensors on the GPU; here gloo and CPU
tensors stand in for it (tests/executor/test_staging_device_gpu.py runs it where CUDA is).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist

from dynaresize.executor.staging import StagingConfig, StagingError
from dynaresize.executor.staging.device import nccl_wire
from dynaresize.executor.staging.network import ACCEPTED, HEADER, PointToPoint, Wire
from dynaresize.executor.staging.paths import TransferRoutes
from dynaresize.traces.phases import TransferPath

CHUNK_BYTES = 4096


def _tensors(seed: int) -> dict[str, torch.Tensor]:
    """Three tensors of different dtypes whose bytes do not fall on chunk boundaries, so the plan
    has chunks that are one run of one tensor (sent as they are) and chunks that span two
    (packed in a buffer)."""
    gen = torch.Generator().manual_seed(seed)
    return {
        "master": torch.randn(3000, generator=gen),
        "exp_avg": torch.randn(1234, generator=gen, dtype=torch.float64),
        "exp_avg_sq": torch.randint(0, 255, (777,), generator=gen, dtype=torch.uint8),
    }


def _empty_like(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: torch.full_like(t, 0) for k, t in tensors.items()}


def _end(num_buffers: int = 2, timeout_s: float = 60.0) -> PointToPoint:
    config = StagingConfig(
        chunk_bytes=CHUNK_BYTES, num_buffers=num_buffers, peer_timeout_s=timeout_s
    )
    group = dist.new_group(list(range(dist.get_world_size())), backend="gloo")
    return PointToPoint(config, control=group, data=Wire(group=group, device=torch.device("cpu")))


def _run(
    world: int,
    body: Callable[[int], dict],
    tmp_path,
    timeout_s: float = 120.0,
    reporting: int | None = None,
) -> list:
    """Run `body(rank)` in `world` forked processes joined by one gloo world; the reports of the
    first `reporting` ranks (all by default; a rank that dies on purpose reports nothing)."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()

    def target(rank: int) -> None:
        torch.set_num_threads(1)
        dist.init_process_group(
            "gloo", init_method=f"file://{tmp_path / 'init'}", rank=rank, world_size=world
        )
        try:
            report = body(rank)
        except Exception as exc:  # reported to the test
            report = {"error": f"{type(exc).__name__}: {exc}"}
        queue.put({"rank": rank, **report})
        queue.close()
        queue.join_thread()
        os._exit(0)  # no teardown handshake with a peer that may be gone

    procs = [ctx.Process(target=target, args=(r,)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        reports = []
        for _ in range(world if reporting is None else reporting):
            reports.append(queue.get(timeout=timeout_s))
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return sorted(reports, key=lambda r: r["rank"])


@pytest.mark.parametrize("num_buffers", [1, 2])
def test_slices_cross_the_wire_bit_for_bit_through_bounded_buffers(tmp_path, num_buffers) -> None:
    def body(rank: int) -> dict:
        end = _end(num_buffers)
        sent = _tensors(seed=7)
        if rank == 0:
            stats = end.send(1, sent, transfer_id=5)
        else:
            into = _empty_like(sent)
            stats = end.receive_into(0, into, transfer_id=5)
            for key in sent:
                assert torch.equal(into[key].view(torch.uint8), sent[key].view(torch.uint8)), key
        return {"bytes": stats.num_bytes, "chunks": stats.num_chunks, "held": end.buffer_bytes}

    reports = _run(2, body, tmp_path)
    expected = sum(t.numel() * t.element_size() for t in _tensors(seed=7).values())
    for report in reports:
        assert "error" not in report, report
        assert report["bytes"] == expected
        assert report["chunks"] == -(-expected // CHUNK_BYTES)
        # only chunks that span two tensors went through buffers, never more than num_buffers
        assert 0 < report["held"] <= num_buffers * CHUNK_BYTES


def test_a_layout_mismatch_fails_both_sides_before_any_state_moves(tmp_path) -> None:
    def body(rank: int) -> dict:
        end = _end()
        sent = _tensors(seed=1)
        try:
            if rank == 0:
                end.send(1, sent, transfer_id=9)
            else:
                into = _empty_like(sent) | {"master": torch.zeros(2999)}
                try:
                    end.receive_into(0, into, transfer_id=9)
                finally:
                    untouched = all(bool((t == 0).all()) for t in into.values())
        except StagingError as err:
            return {"raised": str(err), "untouched": rank == 0 or untouched}
        return {"raised": None}

    sender, receiver = _run(2, body, tmp_path)
    assert "different layout" in sender["raised"], sender
    assert "layout differs" in receiver["raised"] and receiver["untouched"], receiver


def test_a_peer_that_dies_mid_transfer_fails_the_wait_at_once(tmp_path) -> None:
    def body(rank: int) -> dict:
        end = _end(num_buffers=1, timeout_s=120.0)
        big = {"master": torch.randn(200_000)}  # 196 chunks: the receiver dies after one
        if rank == 1:
            # the receiving side of the protocol, up to its first chunk, then a hard exit
            header = torch.empty(HEADER.size, dtype=torch.uint8)
            dist.irecv(header, src=0, group=end.control, tag=3).wait()
            dist.isend(torch.tensor([ACCEPTED], dtype=torch.uint8), 0, end.control, 3).wait()
            dist.irecv(torch.empty(CHUNK_BYTES, dtype=torch.uint8), 0, end.control, 3).wait()
            os._exit(0)
        started = time.monotonic()
        try:
            end.send(1, big, transfer_id=3)
        except StagingError as err:
            return {"raised": str(err), "after_s": time.monotonic() - started}
        return {"raised": None}

    (sender,) = _run(2, body, tmp_path, reporting=1)
    assert sender["raised"] is not None and "transfer 3 to worker 1" in sender["raised"]
    assert sender["after_s"] < 60.0  # the connection broke: no waiting for the timeout


def test_a_silent_peer_times_out_with_a_staging_error(tmp_path) -> None:
    def body(rank: int) -> dict:
        end = _end(timeout_s=1.0)
        if rank == 0:
            time.sleep(4.0)  # alive, but never sends: the receiver must give up on its own
            return {}
        started = time.monotonic()
        try:
            end.receive_into(0, _tensors(seed=0), transfer_id=4)
        except StagingError as err:
            return {"raised": str(err), "after_s": time.monotonic() - started}
        return {"raised": None}

    _, receiver = _run(2, body, tmp_path)
    assert "header of transfer 4 from worker 0" in receiver["raised"], receiver
    assert 0.9 <= receiver["after_s"] < 3.5


def test_sends_and_receives_in_a_ring_run_at_once_on_one_wire(tmp_path) -> None:
    """Each of three workers sends to the next while it receives from the previous one: the
    send in a thread, the receive in the caller, both on the same wire."""

    def body(rank: int) -> dict:
        end = _end()
        world = dist.get_world_size()
        outgoing = _tensors(seed=rank)
        errors: list[BaseException] = []

        def send() -> None:
            try:
                end.send((rank + 1) % world, outgoing, transfer_id=rank)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=send)
        thread.start()
        source = (rank - 1) % world
        into = _empty_like(_tensors(seed=source))
        end.receive_into(source, into, transfer_id=source)
        thread.join()
        if errors:
            raise errors[0]
        expected = _tensors(seed=source)
        return {"equal": all(torch.equal(into[k], expected[k]) for k in expected)}

    for report in _run(3, body, tmp_path):
        assert report.get("equal") is True, report


def test_the_nccl_wire_refuses_a_cpu_device() -> None:
    with pytest.raises(StagingError, match="need a CUDA device"):
        nccl_wire(world_size=2, device=torch.device("cpu"), timeout_s=1.0)


def test_paths_follow_from_the_nodes_and_the_device_setting() -> None:
    nodes = ("a", "a", "b", "b")
    host = TransferRoutes(node_of_worker=nodes)
    device = TransferRoutes(node_of_worker=nodes, device_transfers=True)
    assert host.path(0, 1) is TransferPath.SHM and host.path(1, 2) is TransferPath.NETWORK
    assert host.path(3, 0) is TransferPath.NETWORK
    assert device.path(0, 1) is TransferPath.DEVICE and device.path(2, 1) is TransferPath.NETWORK
    one_node = TransferRoutes(node_of_worker=("a",) * 4)
    assert {one_node.path(s, d) for s in range(4) for d in range(4)} == {TransferPath.SHM}
    assert not one_node.needs_wires  # a single-node CPU run opens no groups: as before
    assert host.needs_wires and device.needs_wires
    assert TransferRoutes(node_of_worker=("a",) * 4, device_transfers=True).needs_wires
