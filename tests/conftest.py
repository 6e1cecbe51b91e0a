"""Shared fixtures. `ray_session`: one local Ray instance for every live test of the session;
`one_torch_thread`: torch on one thread for a module of tiny-model tests."""

from __future__ import annotations

import pytest


def _owner_only_token() -> None:
    """Ray writes its token file readable by everyone, which the live runs of later tests
    refuse; create it first, owner-only, as a live run does."""
    from dynaresize.executor.cluster.auth import token_path, write_token

    write_token(token_path())


@pytest.fixture(scope="session", autouse=True)
def _ray_token_owner_only():
    """Whichever test starts Ray first, its token file is owner-only from the start."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return
    _owner_only_token()


@pytest.fixture(scope="session")
def _ray_started():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        _owner_only_token()
        ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1")
    yield
    if started and ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def ray_session(_ray_started):
    """A running Ray with 4 CPUs (started again if another test shut it down)."""
    import ray

    if not ray.is_initialized():
        _owner_only_token()
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
