"""Bounded host staging: the chunk plan covers every byte once, transfers are bitwise exact, a
mismatched layout or a missing peer fails clearly, and a state far larger than the pool moves
between two processes without either one's sampled peak resident memory growing past the pool
budget plus a small allowance."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import tempfile
import threading
import time

import psutil
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaresize.executor.staging import (
    MIB,
    StagingConfig,
    StagingError,
    StagingPool,
    StagingSender,
    TensorSpec,
    plan_chunks,
)

CPU = torch.device("cpu")


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=5000), min_size=1, max_size=12),
    chunk_bytes=st.integers(min_value=1, max_value=3000),
)
def test_chunk_plan_covers_every_byte_exactly_once(sizes: list[int], chunk_bytes: int) -> None:
    specs = [TensorSpec(f"t{i}", (n,), torch.uint8) for i, n in enumerate(sizes)]
    chunks = plan_chunks(specs, chunk_bytes)
    covered = {i: [] for i in range(len(sizes))}
    for chunk in chunks:
        assert 0 < chunk.num_bytes <= chunk_bytes
        spans = sorted((s.buffer_offset, s.buffer_offset + s.num_bytes) for s in chunk.segments)
        assert spans[0][0] == 0
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end == start  # packed, never overlapping
        for seg in chunk.segments:
            covered[seg.tensor_index].append((seg.tensor_offset, seg.num_bytes))
    for index, size in enumerate(sizes):
        offset = 0
        for start, length in covered[index]:
            assert start == offset
            offset += length
        assert offset == size
    # Full chunks except possibly the last: as few chunks as the bytes allow.
    assert len(chunks) == -(-sum(sizes) // chunk_bytes)


def _state(seed: int, *, scale: int = 1) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "weights": torch.randn(scale * 3_000_000, generator=gen),
        "weights_bf16": torch.randn(scale * 1_000_001, generator=gen).to(torch.bfloat16),
        "step": torch.tensor([17], dtype=torch.int64),
        "moments": torch.randn(scale * 1_500_000, 3, generator=gen),
        "empty": torch.zeros(0),
    }


def _run_pair(config: StagingConfig, source, destination, *, transfer_id: int = 1):
    pool = StagingPool(config, device=CPU)
    sender = StagingSender(config, device=CPU)
    result: dict = {}

    def send() -> None:
        try:
            result["sent"] = sender.send(pool.name, source, transfer_id=transfer_id)
        except Exception as exc:  # surfaced below
            result["error"] = exc

    thread = threading.Thread(target=send)
    thread.start()
    try:
        received = pool.receive_into(destination, transfer_id=transfer_id)
    finally:
        thread.join(timeout=30)
        sender.close()
        pool.close()
    if "error" in result:
        raise result["error"]
    return result["sent"], received


@pytest.mark.parametrize("num_buffers", [1, 2, 3])
def test_transfer_is_bitwise_exact_for_any_buffer_count(num_buffers: int) -> None:
    config = StagingConfig(chunk_bytes=1 * MIB + 13, num_buffers=num_buffers)
    source = _state(0)
    destination = {k: torch.full_like(v, 0) for k, v in source.items()}
    sent, received = _run_pair(config, source, destination)
    for key in source:
        assert torch.equal(
            destination[key].view(-1).view(torch.uint8), source[key].view(-1).view(torch.uint8)
        ), key
    total = sum(t.numel() * t.element_size() for t in source.values())
    assert sent.num_bytes == received.num_bytes == total
    assert received.num_chunks == -(-total // config.chunk_bytes)


def test_layout_mismatch_is_refused() -> None:
    config = StagingConfig(chunk_bytes=64 * 1024, num_buffers=2, peer_timeout_s=0.5)
    source = {"a": torch.ones(1000), "b": torch.ones(10)}
    destination = {"a": torch.zeros(1000), "b": torch.zeros(11)}
    with pytest.raises(StagingError, match="layout differs"):
        _run_pair(config, source, destination)


def test_missing_sender_times_out_with_a_named_error() -> None:
    config = StagingConfig(chunk_bytes=64 * 1024, num_buffers=2, peer_timeout_s=0.2)
    pool = StagingPool(config, device=CPU)
    try:
        with pytest.raises(StagingError, match=r"no 'ready' message for chunk 0 of transfer 7"):
            pool.receive_into({"a": torch.zeros(10)}, transfer_id=7)
    finally:
        pool.close()


def test_non_contiguous_tensor_is_refused_rather_than_copied() -> None:
    config = StagingConfig(chunk_bytes=64 * 1024, num_buffers=2, peer_timeout_s=1)
    pool = StagingPool(config, device=CPU)
    sender = StagingSender(config, device=CPU)
    try:
        with pytest.raises(StagingError, match="not contiguous"):
            sender.send(pool.name, {"t": torch.ones(8, 8).t()}, transfer_id=1)
    finally:
        sender.close()
        pool.close()


# ---------------------------------------------------------------------------------------------
# Peak resident memory of two real processes during a move much larger than the budget.

STATE_SCALE = 4  # about 140 MB of state
CHUNK_BYTES = 2 * MIB
NUM_BUFFERS = 2  # budget 4 MiB
ALLOWANCE_BYTES = 24 * MIB
"""Room for what a process allocates besides the pool while it moves state: Python objects,
per-chunk views, pipe buffers, allocator slack. Far below the ~140 MB a full host copy takes."""


class _PeakSampler:
    """Samples this process's resident set size every half millisecond in a thread."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self._stop = threading.Event()
        self.peak = self._proc.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            self._stop.wait(0.0005)

    def __enter__(self) -> _PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)


def _measured(action) -> tuple[int, int]:
    baseline = psutil.Process().memory_info().rss
    with _PeakSampler() as sampler:
        action()
    return baseline, sampler.peak


def _receiver(config: StagingConfig, queue, control_queue) -> None:
    torch.set_num_threads(1)
    pool = StagingPool(config, device=CPU)
    template = _state(1, scale=STATE_SCALE)
    destination = {k: torch.zeros_like(v) for k, v in template.items()}  # touched pages
    del template
    queue.put(pool.name)
    baseline, peak = _measured(lambda: pool.receive_into(destination, transfer_id=3))
    expected = _state(1, scale=STATE_SCALE)
    exact = all(torch.equal(destination[k], expected[k]) for k in expected)
    size = sum(t.numel() * t.element_size() for t in expected.values())
    # Control: the same sampler sees a full host copy of the state, so it can catch one.
    _, copy_peak = _measured(lambda: [t.clone() for t in destination.values()])
    pool.close()
    control_queue.put(
        {
            "baseline": baseline,
            "peak": peak,
            "exact": exact,
            "state_bytes": size,
            "copy_growth": copy_peak - baseline,
        }
    )


def _sender(config: StagingConfig, pool_name: str, queue) -> None:
    torch.set_num_threads(1)
    state = _state(1, scale=STATE_SCALE)
    sender = StagingSender(config, device=CPU)
    baseline, peak = _measured(lambda: sender.send(pool_name, state, transfer_id=3))
    sender.close()
    queue.put({"baseline": baseline, "peak": peak})


def test_peak_resident_memory_stays_within_budget_while_moving_a_larger_state() -> None:
    config = StagingConfig(chunk_bytes=CHUNK_BYTES, num_buffers=NUM_BUFFERS, peer_timeout_s=60)
    ctx = mp.get_context("fork")
    name_queue, recv_queue, send_queue = ctx.Queue(), ctx.Queue(), ctx.Queue()
    receiver = ctx.Process(target=_receiver, args=(config, name_queue, recv_queue))
    receiver.start()
    pool_name = name_queue.get(timeout=60)
    sender = ctx.Process(target=_sender, args=(config, pool_name, send_queue))
    sender.start()
    started = time.monotonic()
    recv, sent = recv_queue.get(timeout=120), send_queue.get(timeout=120)
    receiver.join(timeout=30)
    sender.join(timeout=30)
    assert time.monotonic() - started < 120
    assert recv["exact"]
    bound = config.budget_bytes + ALLOWANCE_BYTES
    assert recv["state_bytes"] > 4 * bound  # the state really is much larger than the bound
    assert recv["peak"] - recv["baseline"] <= bound, recv
    assert sent["peak"] - sent["baseline"] <= bound, sent
    assert recv["copy_growth"] > bound  # the measurement would have caught a full copy


def test_grants_let_several_senders_wait_on_one_pool_in_any_order() -> None:
    config = StagingConfig(chunk_bytes=256 * 1024, num_buffers=2, peer_timeout_s=10)
    pool = StagingPool(config, device=CPU)
    sources = {sid: {"x": torch.full((300_000,), float(sid))} for sid in (1, 2, 3)}
    senders = {sid: StagingSender(config, device=CPU) for sid in sources}
    errors: list[BaseException] = []

    def send(sid: int) -> None:
        try:
            senders[sid].send(pool.name, sources[sid], transfer_id=10 + sid, sender_id=sid)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(sid,)) for sid in sources]
    for thread in threads:  # all three wait on the same pool before any is granted
        thread.start()
    try:
        for sid in (3, 1, 2):
            destination = {"x": torch.zeros(300_000)}
            pool.receive_into(destination, transfer_id=10 + sid, sender_id=sid)
            assert torch.equal(destination["x"], sources[sid]["x"])
    finally:
        for thread in threads:
            thread.join(timeout=10)
        for sender in senders.values():
            sender.close()
        pool.close()
    assert not errors


def _cuda_receiver(config: StagingConfig, name_queue, result_queue) -> None:
    device = torch.device("cuda", 0)
    pool = StagingPool(config, device=device)
    template = _state(5, scale=2)
    destination = {k: torch.zeros_like(v, device=device) for k, v in template.items()}
    name_queue.put((pool.name, bool(pool._ring.slots[0].is_pinned())))
    stats = pool.receive_into(destination, transfer_id=4, sender_id=0)
    exact = all(torch.equal(destination[k].cpu(), template[k]) for k in template)
    pool.close()
    result_queue.put({"exact": exact, "seconds": stats.seconds, "bytes": stats.num_bytes})


def _cuda_sender(config: StagingConfig, pool_name: str) -> None:
    device = torch.device("cuda", 0)
    state = {k: v.to(device) for k, v in _state(5, scale=2).items()}
    sender = StagingSender(config, device=device)
    sender.send(pool_name, state, transfer_id=4, sender_id=0)
    sender.close()


@pytest.mark.gpu
def test_cuda_state_moves_between_processes_through_pinned_buffers_bitwise() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    config = StagingConfig(chunk_bytes=8 * MIB, num_buffers=2, peer_timeout_s=60)
    ctx = mp.get_context("spawn")  # CUDA cannot be used in a forked child
    name_queue, result_queue = ctx.Queue(), ctx.Queue()
    receiver = ctx.Process(target=_cuda_receiver, args=(config, name_queue, result_queue))
    receiver.start()
    pool_name, pinned = name_queue.get(timeout=120)
    sender = ctx.Process(target=_cuda_sender, args=(config, pool_name))
    sender.start()
    result = result_queue.get(timeout=120)
    receiver.join(timeout=30)
    sender.join(timeout=30)
    assert pinned
    assert result["exact"]
    print(f"staged {result['bytes'] / 1e9:.2f} GB in {result['seconds']:.3f} s")


def _create_pool_and_die(config: StagingConfig, queue) -> None:
    pool = StagingPool(config, device=CPU)
    queue.put(pool.name)
    queue.close()
    queue.join_thread()  # the name must leave before the process does
    os._exit(0)  # like a killed worker: the pool is never closed


def test_pools_of_dead_owners_are_swept() -> None:
    config = StagingConfig(chunk_bytes=64 * 1024, num_buffers=2)
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_create_pool_and_die, args=(config, queue))
    child.start()
    name = queue.get(timeout=30)
    child.join(timeout=30)
    leftovers = [f for d in ("/dev/shm", tempfile.gettempdir()) for f in os.listdir(d)]
    assert any(f.startswith(name) for f in leftovers)
    live = StagingPool(config, device=CPU)  # creating a pool sweeps the dead ones
    try:
        leftovers = [f for d in ("/dev/shm", tempfile.gettempdir()) for f in os.listdir(d)]
        assert not any(f.startswith(name) for f in leftovers)
        assert any(f.startswith(live.name) for f in leftovers)
    finally:
        live.close()
