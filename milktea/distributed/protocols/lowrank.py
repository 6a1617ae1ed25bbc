"""PowerSGD's two all-reduces: of P = M Q, then of Q = M^T P."""
from __future__ import annotations

import copy
import time

import torch

from milktea import cost, trace

from .base import Protocol, log, register

class LowRank(Protocol):
    """PowerSGD (Vogels et al. 2019): per matrix M (the parameter's gradient as rows x rest).

    Hot path, per bucket: M += ledger; P = M Q for every matrix, all P's in one all-reduce;
    orthonormalise each P, Q = M^T P, all Q's in one all-reduce, divided by N; the item
    becomes P Q^T and the ledger keeps M - P Q_own^T. The averaged Q is every rank's warm
    start for the next step, so the ranks stay in step.
    """
    collective = "allreduce"
    summed = True

    def accepts(self, shape):
        if len(shape) < 2:
            return False
        rows = shape[0]
        cols = 1
        for d in shape[1:]:
            cols *= d
        r = min(self.compressor.rank, rows, cols)
        return r * (rows + cols) < rows * cols     # the factors must be smaller than the matrix

    def run(self, comm, items, step):
        with trace.bucket("lowrank", step, self.rank):
            self._run(comm, items, step)

    def _run(self, comm, items, step):
        t0 = time.perf_counter()
        views = [it.tensor.view(it.tensor.shape[0], -1) for it in items]
        mats = [v.float() for v in views]           # the bucket itself when it is float32
        for it, m in zip(items, mats):      # PowerSGD's ledger: the matrix, in float32 as M is
            led = self.ledgers.get(it.name)
            if self.error_feedback and it.used and led is not None and led.residual is not None:
                m.add_(led.residual)
        ps = [self.coder(it.name).project(m) for it, m in zip(items, mats)]
        P = torch.cat([p.reshape(-1) for p in ps])
        log(comm, step, compress_s=time.perf_counter() - t0)
        log(comm, step, payload_bytes=P.numel() * P.element_size())
        comm.all_reduce(P, step)
        t0 = time.perf_counter()
        qs, off = [], 0
        for j, (it, m) in enumerate(zip(items, mats)):
            p = ps[j] = P[off: off + ps[j].numel()].view_as(ps[j])
            off += p.numel()
            q = self.coder(it.name).finish(m, p)
            if self.error_feedback and it.used:   # the ledger keeps what this rank's P Q^T missed
                led = self.ledger(it.name)
                if led.residual is None:
                    led.residual = torch.empty_like(m)
                torch.addmm(m, p, q.t(), alpha=-1, out=led.residual)
            qs.append(q)
        Q = torch.cat([q.reshape(-1) for q in qs])
        log(comm, step, compress_s=time.perf_counter() - t0)
        log(comm, step, payload_bytes=Q.numel() * Q.element_size())
        comm.all_reduce(Q, step)
        t0 = time.perf_counter()
        Q.div_(self.world)
        off = 0
        for it, v, p, q in zip(items, views, ps, qs):
            q = Q[off: off + q.numel()].view_as(q)
            off += q.numel()
            c = self.coders[it.name]
            if c.warm_start:
                c.q = q.clone()       # every rank starts the next step from the same averaged Q
            if v.dtype == torch.float32:
                torch.mm(p, q.t(), out=v)       # P Q^T straight into the bucket
            else:
                v.copy_(p @ q.t())
        log(comm, step, decode_s=time.perf_counter() - t0)
        if trace.ENABLED:
            for it, p, q in zip(items, ps, qs):
                trace.begin(it.name, it.tensor, self.coders[it.name])
                trace.note(step=f"P and Q of rank {p.shape[1]}, float32")
                trace.end(nbytes=4 * (p.numel() + q.numel()))

    def probe(self, tensors, link):
        c = copy.deepcopy(self.compressor)
        t0 = time.perf_counter()
        pb = qb = 0
        for t in tensors:
            m = t.reshape(t.shape[0], -1).float()
            p = c.project(m)
            q = c.finish(m, p)
            c.expand(p, q)
            pb, qb = pb + p.numel() * 4, qb + q.numel() * 4
        N = self.world
        return time.perf_counter() - t0, cost.ring_allreduce_time(pb, N, link) + cost.ring_allreduce_time(qb, N, link)


register("lowrank", LowRank)
