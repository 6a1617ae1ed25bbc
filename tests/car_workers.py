"""Worker functions for the compressed all-reduce tests (run inside launched processes)."""
import torch
import torch.distributed as dist


def _x(rank, step, n):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(n, generator=g) * (1 + rank)


def allreduce_vs_one_process(specs, steps=3, n=1003):
    """For each (label, compressor, error_feedback): every step, the distributed result and
    the same protocol run for all ranks in this one process (on the gathered inputs):
    max |difference|, the exact mean's distance, and the wire bytes this rank logged."""
    from milktea.distributed.comm import Comm
    from milktea.distributed.compressed_allreduce import (CompressedAllReduce, allreduce, simulate_round,
                                                          wire_bytes)
    from milktea.distributed.stats import StatsLog
    rank, N = dist.get_rank(), dist.get_world_size()
    out = {}
    for label, comp, ef in specs:
        log = StatsLog()
        comm = Comm(None, None, log)
        mine = CompressedAllReduce(comp, rank, N, error_feedback=ef)
        every = [CompressedAllReduce(comp, r, N, error_feedback=ef) for r in range(N)]
        diffs, mean_err, logged, expected = [], [], [], []
        for step in range(steps):
            x = _x(rank, step, n)
            got = allreduce(mine, x, comm, step)
            log.close_step()
            xs = [torch.empty_like(x) for _ in range(N)]
            dist.all_gather(xs, x)
            ref = simulate_round(every, xs)
            diffs.append((got - ref).abs().max().item())
            mean_err.append((got - torch.stack(xs).mean(0)).abs().max().item())
            logged.append(log.last.wire_bytes)
            expected.append(wire_bytes(*every[rank].last, rank))
        out[label] = dict(diffs=diffs, mean_err=mean_err, logged=logged, expected=expected,
                          same_everywhere=_same(got))
    return out


def _same(t):
    ts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(ts, t)
    return all(torch.equal(ts[0], u) for u in ts)
