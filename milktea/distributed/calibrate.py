"""Calibrate the cost model on the link in use: time dense all-reduces, fit alpha and B.

    link = calibrate_link(emulated=EmulatedLink.gbit(1))   # inside every rank
    link            # Link(0.98 Gbit/s, 61 us): what the model will use for predictions
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from milktea import cost
from milktea.distributed.comm import Comm
from milktea.distributed.link import EmulatedLink
from milktea.timing import time_it

# The fit weighs relative errors: one small message for the latency, three large ones (up
# to 32 MiB) so that per-call overheads on a fast local link do not blur the bandwidth.
DEFAULT_SIZES = (64 << 10, 4 << 20, 16 << 20, 32 << 20)
#: on an emulated link the sleeps are exact, so no per-call noise needs blurring out: sizes
#: whose all-reduce would take longer than this are left out (three sizes always stay)
EMULATED_BUDGET_S = 0.05


def sizes_for(sizes, emulated: EmulatedLink | None) -> tuple:
    """The sizes to time: all of them on a real link; on `emulated`, those whose all-reduce
    takes at most EMULATED_BUDGET_S there, or, where fewer than three do, the smallest with
    the two that take the budget and a quarter of it (enough to fit alpha and B: the emulated
    link's sleeps carry no noise to average out).

    >>> [round(s / 2**20, 2) for s in sizes_for(DEFAULT_SIZES, EmulatedLink.gbit(1.0))]
    [0.06, 0.75, 2.98]
    >>> sizes_for(DEFAULT_SIZES, None) == DEFAULT_SIZES
    True
    """
    sizes = tuple(sorted(int(s) for s in sizes))
    if emulated is None:
        return sizes
    bandwidth = emulated.link.bandwidth
    quick = tuple(s for s in sizes if 2 * s / bandwidth <= EMULATED_BUDGET_S)
    if len(quick) >= 3:
        return quick
    top = int(EMULATED_BUDGET_S * bandwidth / 2)
    return (sizes[0], top // 4, top) if top // 4 > sizes[0] else sizes[:3]


def measure_allreduce(sizes=DEFAULT_SIZES, repeats: int = 3, emulated: EmulatedLink | None = None,
                      group=None, device=None) -> tuple[list[int], list[float]]:
    """Seconds of a dense float32 all-reduce of each size (bytes), through `emulated` when
    given: the fastest of `repeats` tries (noise on a shared machine only ever adds time;
    small messages get 3x the tries), on the slowest rank. Call on every rank at once."""
    comm = Comm(group, emulated)
    device = device or torch.device("cpu")
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
    out = []
    for nbytes in sizes:
        t = torch.ones(max(1, int(nbytes) // 4), device=device)
        # one untimed call first (connections, allocations); every try starts at a barrier
        times = time_it(lambda t=t: comm.all_reduce(t), repeat=repeats * (3 if nbytes <= 1 << 20 else 1),
                        warmup=1, sync=sync, before=lambda: dist.barrier(group=group))
        # every rank must agree: take the slowest rank's figure
        best = torch.tensor([min(times)], dtype=torch.float64)
        dist.all_reduce(best, op=dist.ReduceOp.MAX, group=group)
        out.append(float(best))
    return [int(s) for s in sizes], out


def calibrate_link(sizes=None, repeats: int = 3, emulated: EmulatedLink | None = None,
                   group=None, device=None) -> "cost.Link":
    """A cost.Link fitted to dense all-reduces of `sizes` (bytes) measured on this link (same on
    every rank); by default DEFAULT_SIZES, or on an emulated link those it times quickly
    (`sizes_for`)."""
    sizes = sizes_for(DEFAULT_SIZES, emulated) if sizes is None else sizes
    sizes, times = measure_allreduce(sizes, repeats, emulated, group, device)
    return cost.fit_allreduce_link(sizes, times, dist.get_world_size(group))
