"""One compile of each loop per machine at a time, whatever the number of processes.

numba compiles a loop on its first call in each process and saves it to its on-disk cache
(`cache=True`: beside the source, in `milktea/__pycache__`), where later processes load it
in about a second. Processes that start together on a cold cache (the ranks of `launch`,
torchrun's, the test runner's workers) each compile every loop themselves, at the same
time: the stochastic codecs' encoder alone takes 20 to 35 CPU seconds. `share_compiles`
makes a compiled loop's compile hold a lock file beside its cache: the first process
compiles and saves, the others wait, then load what it saved.

Only a cache miss takes the lock: calls of an already compiled loop never see it. Where
there is no such lock (not POSIX) or no cache, each process compiles as before.
"""
from __future__ import annotations

import contextlib
import os

try:
    import fcntl
except ImportError:       # pragma: no cover - Windows: no lock, each process compiles
    fcntl = None


@contextlib.contextmanager
def _locked(path: str):
    """Hold an exclusive POSIX lock on `path` (released at exit, or when the process dies)."""
    try:
        f = open(path, "a+b")
    except OSError:       # a cache folder we cannot write to: compile without the lock
        yield
        return
    with f:
        fcntl.lockf(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(f, fcntl.LOCK_UN)


def share_compiles(namespace: dict) -> list[str]:
    """Give every cached numba dispatcher in `namespace` (a module's globals()) the lock;
    return their names. Each numba module of milktea calls it on its last line.

    >>> share_compiles({}) == []
    True
    """
    from numba.core.dispatcher import Dispatcher
    shared = []
    for name, obj in list(namespace.items()):
        path = getattr(getattr(obj, "_cache", None), "_cache_path", None)
        if fcntl is None or not isinstance(obj, Dispatcher) or path is None or "compile" in vars(obj):
            continue
        lock = os.path.join(path, f"{obj.py_func.__module__}.{obj.py_func.__qualname__}.compile-lock")

        def compile(sig, _inner=obj.compile, _lock=lock):
            with _locked(_lock):
                return _inner(sig)      # loads the cache another process saved meanwhile, if any
        obj.compile = compile
        shared.append(name)
    return shared
