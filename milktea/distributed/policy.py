"""The `auto` policy: compress a bucket only where the cost model says it pays.

At a bucket's first compressed step every rank times its compressor on the real bucket
(compress once, decode N packets), prices both ways of sending it with the calibrated
link model, and the ranks agree on the slowest rank's figures (one tiny all-reduce), so
all of them take the same decision. A bucket is compressed when

    dense all-reduce time  >  (1 + margin) * (codec time + compressed collectives' time)

On a fast link (loopback) the codec costs more than it saves and everything stays dense.
"""
from __future__ import annotations

import copy
import time

import torch
import torch.distributed as dist

from milktea import cost
from milktea.compressors import Cast
from milktea.packet import Packet

MARGIN = 0.2


def _timed(fn, repeats: int = 2):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def probe(state, plan, buf) -> tuple[float, float]:
    """(codec seconds, compressed communication seconds) for this bucket on this rank."""
    link, N = state.model_link, state.world
    comp = [buf.narrow(0, s.offset, s.numel) for s in plan.segments if s.compress]
    if not comp:
        return 0.0, 0.0
    x = comp[0] if len(comp) == 1 else torch.cat(comp)
    c = copy.deepcopy(state.compressor)  # leave the real ledgers and warm starts untouched
    if plan.family == "gather":
        t_c, packet = _timed(lambda: c.compress(x))
        wire = Packet.from_tensor(packet.to_tensor())
        t_d, _ = _timed(lambda: c.aggregate([wire] * N))
        comm = cost.allgather_time(8, N, link) + cost.allgather_time(packet.nbytes, N, link)
        return t_c + t_d, comm
    if plan.family == "allreduce":
        dtype = c.dtype if isinstance(c, Cast) else x.dtype
        t_c, low = _timed(lambda: x.div(N).to(dtype))
        t_d, _ = _timed(lambda: low.to(x.dtype))
        return t_c + t_d, cost.ring_allreduce_time(low.numel() * low.element_size(), N, link)
    # powersgd: two matrix products, an orthonormalisation and an expansion per matrix
    shapes = [s.shape for s in plan.segments if s.compress]

    def run():
        p_bytes = q_bytes = 0
        for v, sh in zip(comp, shapes):
            m = v.view(sh[0], -1).float()
            p = c.project(m)
            q = c.finish(m, p)
            c.expand(p, q)
            p_bytes, q_bytes = p_bytes + p.numel() * 4, q_bytes + q.numel() * 4
        return p_bytes, q_bytes
    t, (pb, qb) = _timed(run)
    return t, cost.ring_allreduce_time(pb, N, link) + cost.ring_allreduce_time(qb, N, link)


def decide_bucket(state, plan, buf, step) -> str:
    link, N = state.model_link, state.world
    codec_s, comm_s = probe(state, plan, buf)
    agreed = torch.tensor([codec_s, comm_s], dtype=torch.float64, device=buf.device)
    state.comm.all_reduce(agreed, step, op=dist.ReduceOp.MAX)
    codec_s, comm_s = agreed.tolist()
    comp_bytes = sum(s.numel for s in plan.segments if s.compress) * buf.element_size()
    dense_s = cost.ring_allreduce_time(comp_bytes, N, link)
    decision = "compress" if dense_s > (1 + MARGIN) * (codec_s + comm_s) else "dense"
    state.decisions[plan.index] = dict(bucket=plan.index, decision=decision, dense_s=dense_s,
                                       codec_s=codec_s, compressed_comm_s=comm_s, bytes=comp_bytes)
    return decision
