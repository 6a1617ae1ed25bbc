"""Every thread's stack of every rank still running when a collective timed out.

A collective that times out says only that a peer never came. To say what each rank was
doing, every worker arms `faulthandler` on SIGUSR1 at start (`arm`), writing into a file of
its own in a folder the parent made; after a timeout the parent signals the ranks still
alive and appends what they wrote to the error (`collect`). faulthandler writes from the
signal handler without taking the interpreter's lock, so a rank that is stuck holding it
(or stuck anywhere in C++) is still shown. Only the first frames of each thread are kept.

    >>> text = 'Thread 0x1 (most recent call first):\\n  File "a.py", line 3 in f\\n'
    >>> condense(text, frames=1)
    'Thread 0x1 (most recent call first):\\n  File "a.py", line 3 in f'
"""
from __future__ import annotations

import contextlib
import faulthandler
import os
import shutil
import signal
import tempfile
import time

SIGNAL = getattr(signal, "SIGUSR1", None)   # absent on Windows: nothing is collected there
MAX_BYTES = 1 << 16     # read at most this much of a rank's file (a rank could write anything)
FRAMES = 8              # frames kept per thread, innermost first
_armed: list = []       # the open file faulthandler writes into (it must stay open)


def make_dir() -> str | None:
    """A private folder for the ranks' files (None where signals cannot be used)."""
    if SIGNAL is None:
        return None
    return tempfile.mkdtemp(prefix="milktea-stacks-")


def _path(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank{int(rank)}.txt")


def arm(directory: str | None, rank: int) -> None:
    """In a worker: on SIGUSR1, write every thread's stack into this rank's file."""
    if directory is None or SIGNAL is None:
        return
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        fd = os.open(_path(directory, rank), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        f = os.fdopen(fd, "w")
        faulthandler.register(SIGNAL, file=f, all_threads=True, chain=False)
        _armed[:] = [f]


def collect(directory: str | None, pids: dict[int, int], wait: float = 2.0) -> dict[int, str]:
    """Signal each rank (rank -> pid) and return what it wrote, condensed, by rank."""
    if directory is None or SIGNAL is None or not pids:
        return {}
    for rank, pid in pids.items():
        with contextlib.suppress(OSError):
            os.truncate(_path(directory, rank), 0)      # the rank appends: a fresh dump each time
            os.kill(pid, SIGNAL)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and not all(_read(_path(directory, r)) for r in pids):
        time.sleep(0.1)
    time.sleep(0.2)          # a dump that has begun ends within microseconds; this is ample
    out = {rank: _read(_path(directory, rank)) for rank in sorted(pids)}
    return {rank: condense(text) for rank, text in out.items() if text}


def _read(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        return f.read(MAX_BYTES).decode("utf-8", errors="replace")


def condense(text: str, frames: int = FRAMES) -> str:
    """Each thread's header and its first `frames` frames (faulthandler's format)."""
    kept, count = [], 0
    for line in text.splitlines():
        if line.startswith(("Thread ", "Current thread ")):
            kept.append(line)
            count = 0
        elif line.startswith("  File ") and count < frames:
            kept.append(line)
            count += 1
        elif line.startswith("  File ") and count == frames:
            kept.append("  ...")
            count += 1
    return "\n".join(kept)


def describe(stacks: dict[int, str]) -> str:
    """The text appended to the error."""
    if not stacks:
        return ""
    return ("\n\nthe threads of the ranks still running (most recent call first):\n" +
            "\n".join(f"--- rank {rank} ---\n{text}" for rank, text in stacks.items()))


def remove(directory: str | None) -> None:
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
