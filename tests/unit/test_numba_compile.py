"""A compiled loop's compile holds a lock beside numba's cache, so that processes starting
together compile it once; calls of a compiled loop never take it."""
import numba
import pytest

from milktea import numba_compile


@numba.njit(cache=True)
def _twice(x):
    return 2 * x


@numba.njit
def _uncached(x):
    return x


def test_only_a_cache_miss_takes_the_lock(monkeypatch):
    taken = []
    real = numba_compile.fcntl.lockf
    monkeypatch.setattr(numba_compile.fcntl, "lockf", lambda f, op: (taken.append((f.name, op)), real(f, op)))
    space = {"twice": _twice, "uncached": _uncached, "other": 3}
    assert numba_compile.share_compiles(space) == ["twice"]     # a cache to share, and a loop
    assert numba_compile.share_compiles(space) == []            # never wrapped twice
    assert _twice(3) == 6 and _twice(4) == 8 and _twice(2.5) == 5.0
    locks = {name for name, _ in taken}
    assert len(locks) == 1 and locks.pop().endswith(f"{__name__}._twice.compile-lock")
    assert [op for _, op in taken] == [numba_compile.fcntl.LOCK_EX, numba_compile.fcntl.LOCK_UN] * 2   # int, float


@pytest.mark.parametrize("module", ["numba_kernels", "numba_stochastic", "numba_cast"])
def test_every_cached_loop_of_the_library_shares_its_compile(module):
    import importlib
    from numba.core.dispatcher import Dispatcher
    mod = importlib.import_module(f"milktea.{module}")
    cached = [n for n, v in vars(mod).items() if isinstance(v, Dispatcher) and hasattr(v._cache, "_cache_path")]
    assert cached and all("compile" in vars(getattr(mod, n)) for n in cached)
