"""Small worker functions for notebooks and the shell (launch needs importable functions).

    from milktea.distributed import launch
    from milktea.distributed.examples import allreduce_sum, allreduce_times
    launch(allreduce_sum, 4)                     # {'world': 4, 'sum': 10.0, ...}
    launch(allreduce_times, 2, kwargs=dict(link_gbit=1.0))   # sizes, seconds, fitted link

    python -m milktea.distributed -n 2 milktea.distributed.examples:allreduce_sum
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def allreduce_sum() -> dict:
    """Every rank sends rank + 1; all-reduce adds them up: N (N + 1) / 2 on every rank."""
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    return {"world": dist.get_world_size(), "sum": float(t), "backend": dist.get_backend(),
            "threads": torch.get_num_threads(), "pid": os.getpid()}


def allreduce_times(sizes=(4 << 10, 64 << 10, 1 << 20, 8 << 20, 32 << 20), repeats: int = 3,
                    link_gbit: float | None = None, latency_us: float = 50.0) -> dict:
    """Time a dense float32 all-reduce of each size (bytes) on the real link or an emulated
    one, and fit the cost model's alpha (latency) and B (bandwidth) to the times."""
    from milktea import cost
    from milktea.distributed.calibrate import measure_allreduce
    from milktea.distributed.link import EmulatedLink
    link = EmulatedLink.gbit(link_gbit, latency_us * 1e-6) if link_gbit else None
    sizes, times = measure_allreduce(sizes, repeats, emulated=link)
    N = dist.get_world_size()
    fit = cost.calibrate(sizes, times, N) if N > 1 else None
    return {"sizes": sizes, "seconds": times, "workers": N,
            "bandwidth": fit.bandwidth if fit else None, "latency": fit.latency if fit else None,
            "predicted": [cost.ring_allreduce_time(s, N, fit) for s in sizes] if fit else None}
