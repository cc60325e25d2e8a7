"""A free TCP port on this host, for a test's torchrun rendezvous or a daemon it starts: fixed ports collide when
two test runs share a host (two checkouts, a developer's run beside CI's), and a collision fails a run for
nothing the test checks."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now (the kernel's choice; a race with another process taking it is possible but
    far rarer than two runs picking the same fixed number)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
