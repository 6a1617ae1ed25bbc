"""Worker functions for tests/integration/test_launch.py and test_pool.py (workers import this module by name)."""
import os
import signal
import time

import torch
import torch.distributed as dist

from milktea.distributed.worker import progress, report


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
            report(("stopping", time.time()))
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


def ddp_hang_at(rank: int, step: int, hook: bool = True):
    """A small DDP model (with milktea's hook, or plain) trained step by step; `rank` stops
    inside its step `step` (a sleep before its forward pass), after telling the parent when."""
    import milktea
    from milktea import TopK
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)))
    if hook:
        milktea.ddp.compress(model, TopK(ratio=0.1), error_feedback=True, min_size=16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for s in range(10_000):
        if dist.get_rank() == rank and s == step:
            report(("stopping", time.time()))
            time.sleep(3600)
        model(torch.randn(8, 32)).square().mean().backward()
        opt.step()
        opt.zero_grad()
        progress()
    return "finished"
