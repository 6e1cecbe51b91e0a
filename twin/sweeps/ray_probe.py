"""Does a Ray cluster answer at an address? Asked before a sweep creates or starts anything.

`ray.init(address=...)` keeps retrying a cluster that is not there, for minutes, and only then
fails with a page of log lines. A sweep given `--address` asks first, within
`RAY_CONNECT_TIMEOUT_S`: a TCP connection to the address (nothing listening is known at once),
then a `ray.init` in a child process that is killed if it has not connected in time (something
listening that is not Ray). Either failure is one `ConfigError` line; nothing has been created.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

from dynaresize.config_io import ConfigError

RAY_CONNECT_TIMEOUT_S = 30.0
"""How long a sweep waits for a Ray cluster to answer before giving up (seconds)."""

LOCAL = "local"
"""The address that starts a Ray cluster on this machine instead of joining one."""

_PROBE = (
    "import sys, ray\n"
    "ray.init(address=sys.argv[1], log_to_driver=False, logging_level='ERROR')\n"
    "ray.shutdown()\n"
)


def host_and_port(address: str) -> tuple[str, int] | None:
    """(host, port) of `host:port` or `ray://host:port`; None for `auto` and other forms."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _tcp_problem(host: str, port: int, timeout_s: float) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except OSError as err:
        return err.strerror or str(err)


def _ray_problem(address: str, timeout_s: float) -> str | None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, address],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return f"Ray did not connect within {timeout_s:g} s"
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit code {done.returncode}"
        return f"Ray could not connect: {last[:200]}"
    return None


def require_ray_cluster(address: str, *, timeout_s: float | None = None) -> None:
    """Raise ConfigError unless a Ray cluster answers at `address` within the timeout."""
    if address == LOCAL:
        return
    limit = RAY_CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    started = time.monotonic()
    target = host_and_port(address)
    problem = _tcp_problem(*target, limit) if target is not None else None
    if problem is None:
        left_s = max(1.0, limit - (time.monotonic() - started))
        problem = _ray_problem(address, left_s)
        if problem is not None and problem.startswith("Ray did not connect"):
            problem = f"Ray did not connect within {limit:g} s"
    if problem is not None:
        raise ConfigError(
            f"--address {address}: no Ray cluster answers there ({problem}); start one with "
            f"`ray start --head` or use --address {LOCAL}"
        )
