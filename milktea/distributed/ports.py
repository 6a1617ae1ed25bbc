"""A free port for a run's rendezvous (rank 0's store)."""
from __future__ import annotations

import random
import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on `host`, for rank 0's store to listen on a few
    seconds later (once its interpreter has started).

    Chosen at random below the kernel's ephemeral range where there is room: a port the OS
    hands out (bind to port 0) is one it may hand out again in that window, as the local
    end of any outgoing connection on the machine, and rank 0 then fails with
    EADDRINUSE (it did, under a loaded test run). Ports below the range are only ever
    taken by a program that names them."""
    low, high = _ephemeral_range()
    rng = random.SystemRandom()
    for _ in range(64):
        port = rng.randrange(max(1024, low - 16384), low) if low > 2048 else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return s.getsockname()[1]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections (Linux; elsewhere its default)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(v) for v in f.read().split()[:2])
        return low, high
    except (OSError, ValueError):
        return 32768, 60999
