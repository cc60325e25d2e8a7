"""A point's lock: the one sweep that runs a point holds an exclusive flock on its file (the file names that
sweep), so two sweeps over one results folder never run a point twice at once."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

from caraml.errors import BadInput


def claim(path: Path) -> int | None:
    """The point's lock, taken (an open descriptor holding an exclusive flock, the file naming this sweep); None
    while another process holds it: another sweep's point, or a point whose sweep is gone (still saving its
    record, or an orphan)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise BadInput(f"lock {path} cannot be opened ({exc.strerror or exc}); remove it, or pass another "
                       f"--results DIR") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
    except OSError:  # a full disk: the lock holds all the same, only its owner goes unnamed
        pass
    return fd


def owner_of(path: Path) -> tuple[int, str] | None:
    """The sweep that took the lock (pid, host) as its file says; None where it says none."""
    try:
        pid, host = path.read_text().split()
        return int(pid), host
    except (OSError, ValueError):
        return None


def holder(path: Path) -> str:
    """Who holds a point's lock, for people: "sweep 12 on node1 runs it", "its sweep 12 on node1 is gone"."""
    owner = owner_of(path)
    if owner is None:
        return "its sweep is not named"
    pid, host = owner
    return f"sweep {pid} on {host} runs it" if alive(owner) else f"its sweep {pid} on {host} is gone"


def alive(owner: tuple[int, str] | None) -> bool:
    """Whether the sweep that took a lock still runs (a sweep on another host is taken to)."""
    if owner is None:
        return False
    pid, host = owner
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


WAIT_POLL_S = 0.5  # how often a held lock is tried again


def wait_for(path: Path, grace_s: float) -> int | None:
    """The point's lock once its holder lets it go: a point of another sweep is waited for as long as that
    sweep runs (it keeps the point's time limit); a point whose sweep is gone was sent SIGTERM when its sweep
    died, and is given `grace_s` to save its record. None when it still holds the lock then."""
    gone_since = None
    while (lock := claim(path)) is None:
        now = time.monotonic()
        if alive(owner_of(path)):
            gone_since = None
        elif gone_since is None:
            gone_since = now
        elif now - gone_since > grace_s:
            return None
        pause(WAIT_POLL_S)
    return lock


def pause(seconds: float) -> None:
    time.sleep(seconds)
