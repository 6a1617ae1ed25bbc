"""Thread pools sized per rank, so that N ranks on one machine do not fight for its cores.

Every rank of a job on one machine runs its own pools: torch's intra-op pool and numba's
(behind milktea's fused quantize kernels). Left alone, each pool takes every core, and
N ranks then run N x cores threads; numba's threads spin between kernels and slow the
other ranks' backward passes several times over. milktea's own launcher sets the
counts for its workers; under torchrun (or any launcher that sets LOCAL_WORLD_SIZE)
this module does it on first use, with nothing for the user to set:

    >>> from milktea import threads
    >>> threads.per_rank(local_world=2, cores=16)
    8

A count the user set (NUMBA_NUM_THREADS, OMP_NUM_THREADS) is always respected.
torchrun sets OMP_NUM_THREADS=1 when it starts several ranks per node; that is kept too
(one intra-op thread per rank is what torchrun chose, and a user can override it).
"""
from __future__ import annotations

import contextlib
import os
import sys


def cpu_count() -> int:
    """Cores this process may use (respects affinity masks and containers' cpusets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def local_world_size() -> int:
    """Ranks on this machine, as torchrun (or milktea's launcher) says; 1 outside a job."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def per_rank(local_world: int | None = None, cores: int | None = None) -> int:
    """Threads per rank so that the ranks on one machine together fit it: cores // N, >= 1."""
    local_world = local_world_size() if local_world is None else local_world
    cores = cpu_count() if cores is None else cores
    return max(1, cores // max(1, local_world))


_done: dict = {}


def configure() -> dict:
    """Size this process's pools for its share of the cores (once; later calls return the
    first answer). Only inside a multi-rank job (LOCAL_WORLD_SIZE > 1) and only for counts
    the user left unset. Call before numba is imported to size its pool from the start;
    afterwards numba is limited with set_num_threads. Returns what was decided."""
    if _done:
        return _done
    n, world = per_rank(), local_world_size()
    _done.update(local_world=world, threads=n, numba="as is", torch="as is")
    if world <= 1:
        return _done
    if "NUMBA_NUM_THREADS" not in os.environ:
        os.environ["NUMBA_NUM_THREADS"] = str(n)   # read by numba when it is imported
        _done["numba"] = n
        numba = sys.modules.get("numba")
        if numba is not None:   # imported already, with a pool sized for the whole machine
            numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    if "OMP_NUM_THREADS" not in os.environ:
        import torch
        torch.set_num_threads(n)
        _done["torch"] = n
    return _done


configure()   # on import: milktea.kernels imports this module before numba


@contextlib.contextmanager
def one_thread():
    """torch's intra-op pool at one thread inside the block, restored after: a small model
    runs faster on one thread than on two that fight over cores shared with other programs
    (chapter 03's GPT statistics: 58 s with two threads on a busy 2-core machine, 11 s with one).

    >>> import torch
    >>> with one_thread():
    ...     torch.get_num_threads()
    1
    """
    import torch
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)
