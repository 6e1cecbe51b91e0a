"""A TCP port that is free on this host right now.

The loopback test cluster (`testing.loopback_cluster`) asks for one for each of its Ray
servers; it imports nothing of the project, so either side can.
"""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"
EVERY_INTERFACE = ""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port free on `host` right now (`EVERY_INTERFACE`: free on all of them)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
