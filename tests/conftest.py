"""Shared fixtures. `ray_session`: one local Ray instance for every live test of the session;
`one_torch_thread`: torch on one thread for a module of tiny-model tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def _ray_started():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1")
    yield
    if started and ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def ray_session(_ray_started):
    """A running Ray with 4 CPUs (started again if another test shut it down)."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1")
    return ray


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run fastest on one thread; restore the setting for other modules."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
