"""Worker functions for tests/integration/test_launch.py and test_pool.py (workers import this module by name)."""
import os
import signal
import time

import torch
import torch.distributed as dist

from milktea.distributed.worker import progress


def kill_self_at(rank: int, step: int):
    """Every rank steps with an all-reduce; `rank` kills itself with SIGKILL at `step`,
    so its peer then fails in a collective with a lost connection."""
    t = torch.ones(1 << 16)
    for s in range(50):
        if dist.get_rank() == rank and s == step:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(t)
        progress()
        time.sleep(0.05)
    return "finished"


def hang_at(rank: int, step: int):
    """`rank` stops making progress at `step` (a sleep; its peers wait in the all-reduce)."""
    t = torch.ones(8)
    for s in range(10_000):
        if dist.get_rank() == rank and s == step:
            time.sleep(3600)
        dist.all_reduce(t)
        progress()
        time.sleep(0.02)
    return "finished"


def draw():
    """Three numbers from torch's default generator, as the process finds it."""
    return torch.randn(3)


def sleep_forever():
    time.sleep(3600)


def say_hello():
    from milktea.distributed.worker import report
    report(f"hello from {dist.get_rank()}")
