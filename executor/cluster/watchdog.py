"""A process that outlives the driver, so that nothing the driver started outlives the driver.

A driver that is SIGKILLed (or crashes) runs no cleanup: Ray's own reaper stops the processes of
the driver's process group, but the agents the raylet starts (DashboardAgent, RuntimeEnvAgent)
and the workers it forks can stay alive for tens of seconds, holding shared-memory staging pools.
The watchdog is started by the driver in a session of its own (a Ctrl-C or a kill of the driver's
group does not reach it) with a pipe on its stdin whose only writer is the driver:

- once it has noted them the first time it writes `watching` on its stdout, and the driver
  waits for that line before it starts anything (a driver killed while the watchdog was still
  starting would otherwise leave what it started unnoted);
- while the pipe is open it notes, every `REFRESH_S`, every process descended from the driver
  (pid and start time: a reused pid is never mistaken for one of them);
- the driver writes `done` after its own orderly cleanup, and the watchdog exits;
- the pipe closing without `done` means the driver died: the watchdog SIGKILLs every noted
  process still alive (and their children), waits for them to exit, then removes the staging
  pools whose owner is gone.

It waits on the pipe (no busy loop); the refresh is the only periodic work. Run as
`python -m dynaresize.executor.cluster.watchdog DRIVER_PID`; it imports psutil and the staging
sweep only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys

import psutil

REFRESH_S = 1.0
"""How often the watchdog notes the driver's descendants (a process started and left behind
within this window of the driver's death is the one thing it can miss)."""
KILL_WAIT_S = 10.0
"""How long it waits for killed processes to exit before sweeping staging."""
DONE = b"done"
WATCHING = b"watching"
"""The watchdog's one line to the driver: it has noted the driver's descendants once, so from
here on whatever the driver starts is noted within `REFRESH_S`."""
START_TIMEOUT_S = 60.0
"""How long the driver waits for that line (a Python start on a loaded machine can take seconds)."""


def descendants(driver: psutil.Process) -> dict[int, float]:
    """Every process below `driver` now, by pid, with its start time."""
    found: dict[int, float] = {}
    me = os.getpid()
    try:
        children = driver.children(recursive=True)
    except psutil.Error:
        return found
    for child in children:
        if child.pid == me:
            continue
        try:
            found[child.pid] = child.create_time()
        except psutil.Error:
            continue
    return found


def kill_noted(noted: dict[int, float]) -> list[int]:
    """SIGKILL every noted process that is still the one noted (same start time), and whatever
    it started; wait for them to exit. Returns the pids killed."""
    victims: dict[int, psutil.Process] = {}
    for pid, started in noted.items():
        try:
            proc = psutil.Process(pid)
            if abs(proc.create_time() - started) > 1e-3:
                continue  # the pid was reused by a process this run did not start
            victims[pid] = proc
            for child in proc.children(recursive=True):
                victims.setdefault(child.pid, child)
        except psutil.Error:
            continue
    victims.pop(os.getpid(), None)
    for proc in victims.values():
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            continue
    psutil.wait_procs(list(victims.values()), timeout=KILL_WAIT_S)
    return sorted(victims)


def watch(driver_pid: int, *, stdin_fd: int = 0) -> int:
    """Watch the driver until its pipe closes; returns the number of processes killed."""
    try:
        driver = psutil.Process(driver_pid)
    except psutil.Error:
        return 0
    noted: dict[int, float] = {}
    received = b""
    announced = False
    while True:
        noted.update(descendants(driver))
        if not announced:  # the driver waits for this line before it starts anything
            announced = True
            with contextlib.suppress(OSError):
                os.write(1, WATCHING + b"\n")
        readable, _, _ = select.select([stdin_fd], [], [], REFRESH_S)
        if not readable:
            continue
        data = os.read(stdin_fd, 4096)
        if not data:
            break
        received += data
    if DONE in received:
        return 0
    killed = kill_noted(noted)
    from dynaresize.executor.staging.ring import sweep_stale_pools

    sweep_stale_pools()
    return len(killed)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the driver's to handle
    watch(int(sys.argv[1]))


if __name__ == "__main__":
    main()
