"""PowerSGD's two all-reduces: of P = M Q, then of Q = M^T P."""
from __future__ import annotations

import copy
import math
import time

import torch

from milktea import cost, trace
from milktea.kernels import TORCH_PIECE

from .base import Protocol, log, register

#: entries of P Q^T formed at a time (~1 MB, stays in cache): the whole rank-r product at
#: once runs 2-3x slower on a wide matrix (5028 x 5028: 31 ms against 9 ms in 1 MB blocks)
CHUNK = TORCH_PIECE


def rank_r_product(p: torch.Tensor, qt: torch.Tensor, out: torch.Tensor, alpha: float | None = None,
                   chunk: int = CHUNK) -> torch.Tensor:
    """out = P Q^T (alpha None) or out += alpha P Q^T, a block of rows at a time.

    >>> p, qt, out = torch.ones(3, 1), torch.ones(1, 2), torch.zeros(3, 2)
    >>> rank_r_product(p, qt, out, chunk=2).sum().item(), rank_r_product(p, qt, out, alpha=-1).sum().item()
    (6.0, 0.0)
    """
    rows = max(1, chunk // max(1, out.shape[1]))
    for r0 in range(0, out.shape[0], rows):
        if alpha is None:
            torch.mm(p[r0: r0 + rows], qt, out=out[r0: r0 + rows])
        else:
            out[r0: r0 + rows].addmm_(p[r0: r0 + rows], qt, alpha=alpha)
    return out

class LowRank(Protocol):
    """PowerSGD (Vogels et al. 2019): per matrix M (the parameter's gradient as rows x rest).

    Hot path, per bucket: ledger += M (the ledger is then the matrix compressed); P = M Q
    for every matrix, all P's in one all-reduce; orthonormalise each P, Q = M^T P, all Q's
    in one all-reduce, divided by N; the item becomes P Q^T and the ledger keeps
    M - P Q_own^T (in place). The averaged Q is every rank's warm start for the next step,
    so the ranks stay in step. Every product runs on M in its own row-major layout (Q is
    kept as a view of a contiguous Q^T), and P and Q are written straight into the
    all-reduced buffers: five passes over each matrix per step.
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
        if trace.ENABLED:
            trace.hop("lowrank")
        self._run(comm, items, step)

    def _matrix(self, it, v):
        """The matrix to compress: under error feedback the ledger itself, after
        `Ledger.add` (ledger += gradient; so the ledger's update later is one in-place
        pass, `Ledger.subtract_product`), else a float32 copy of the gradient. A copy even
        of a float32 bucket: a BLAS product's bits depend on where its operand starts in
        memory (on one CPU, M Q with a warm-start Q differs in the last bits when M starts 4
        bytes off a 16-byte boundary), and DDP puts a parameter at another offset after it
        rebuilds its buckets, or in a resumed process; the ledger and a copy are allocations
        of their own, aligned alike."""
        if not (self.error_feedback and it.used):
            return v.to(torch.float32, copy=True)
        m = self.ledger(it.name).add(v)
        return m if m.dtype == torch.float32 else m.float()

    def _run(self, comm, items, step):
        t0 = time.perf_counter()
        views = [it.tensor.view(it.tensor.shape[0], -1) for it in items]
        mats = [self._matrix(it, v) for it, v in zip(items, views)]
        ranks = [self.coder(it.name)._rank_for(m) for it, m in zip(items, mats)]
        device = mats[0].device if mats else None
        P = torch.empty(sum(m.shape[0] * r for m, r in zip(mats, ranks)), device=device)
        Q = torch.empty(sum(m.shape[1] * r for m, r in zip(mats, ranks)), device=device)
        ps, qts, po, qo = [], [], 0, 0
        for it, m, r in zip(items, mats, ranks):     # P = M Q, written straight into the message
            ps.append(P[po: po + m.shape[0] * r].view(m.shape[0], r))
            qts.append(Q[qo: qo + m.shape[1] * r].view(r, m.shape[1]))
            po, qo = po + ps[-1].numel(), qo + qts[-1].numel()
            self.coder(it.name).project(m, out=ps[-1])
        log(comm, step, compress_s=time.perf_counter() - t0)
        log(comm, step, payload_bytes=P.numel() * P.element_size())
        comm.all_reduce(P, step)
        t0 = time.perf_counter()
        qs = []
        for it, m, p, qt in zip(items, mats, ps, qts):
            qs.append(self.coders[it.name].finish(m, p, out=qt))     # Q^T = P^T M, into the message
            if self.error_feedback and it.used:   # the ledger keeps what this rank's P Q^T missed
                self.ledgers[it.name].subtract_product(p, qt)
        log(comm, step, compress_s=time.perf_counter() - t0)
        log(comm, step, payload_bytes=Q.numel() * Q.element_size())
        comm.all_reduce(Q, step)
        t0 = time.perf_counter()
        Q.div_(self.world)
        for it, v, p, qt in zip(items, views, ps, qts):
            c = self.coders[it.name]
            if c.warm_start:
                c.q = qt.t()          # every rank starts the next step from the same averaged Q
            if v.dtype == torch.float32:
                rank_r_product(p, qt, v)        # P Q^T straight into the bucket
            else:
                v.copy_(p @ qt)
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


class BatchedLowRank(LowRank):
    """PowerSGD over a whole bucket at once (``PowerSGD(rank, batched=True)``), as PyTorch's
    batched_powerSGD_hook: every item of the bucket (any shape, biases too) is flattened,
    concatenated and zero-padded into one n x n matrix M, n = ceil(sqrt(numel)); then the
    same two all-reduces as `LowRank`, of one P (n x r) and one Q (n x r). The warm start
    and the ledger (n x n, float32, padding included) belong to a group of parameters, the
    bucket that first held them: they are kept under its parameter names joined by "|". A
    bucket made of known groups runs each as before (a resumed process's first step has
    DDP's first layout, whose buckets hold the rebuilt ones: it resumes bit for bit); any
    other bucket becomes a new group, and the groups it overlaps are dropped.

    >>> from milktea import PowerSGD
    >>> BatchedLowRank.side(10), BatchedLowRank(PowerSGD(4, batched=True)).accepts((7,))   # biases join
    (4, True)
    """
    CHUNK = CHUNK       # decode this many entries at a time (a small temporary, in cache)

    def accepts(self, shape):
        return True

    @staticmethod
    def side(numel: int) -> int:
        """The side of the square matrix that holds `numel` entries: ceil(sqrt(numel))."""
        n = math.isqrt(numel)
        return n if n * n == numel else n + 1

    def _run(self, comm, items, step):
        for group in self._groups(items):
            self._run_group(comm, group, step)

    def _groups(self, items) -> list:
        """The matrices of a bucket: its known groups if it is made of them, else itself."""
        by_name = {it.name: it for it in items}
        groups = [[by_name[n] for n in key.split("|")] for key in self.coders
                  if all(n in by_name for n in key.split("|"))]
        if sorted(it.name for g in groups for it in g) == sorted(by_name):
            return groups
        names = set(by_name)
        for key in [k for k in self.coders if names.intersection(k.split("|"))]:
            del self.coders[key]                 # these parameters now belong to the new group
            self.ledgers.pop(key, None)
        return [items]

    def _run_group(self, comm, items, step):
        t0 = time.perf_counter()
        key = "|".join(it.name for it in items)
        flats = [it.tensor.view(-1) for it in items]
        n = self.side(sum(v.numel() for v in flats))
        c = self.coder(key)
        flat = torch.zeros(n * n, device=flats[0].device)   # the gradients, zero-padded to a square
        off = 0
        for v in flats:
            flat[off: off + v.numel()].add_(v)
            off += v.numel()
        if self.error_feedback:    # the ledger is the matrix: ledger += gradients
            flat = self.ledger(key).add(flat)
        m = flat.view(n, n)
        r = c._rank_for(m)
        P = torch.empty(n * r, device=m.device)
        p = c.project(m, out=P.view(n, r))
        log(comm, step, compress_s=time.perf_counter() - t0)
        log(comm, step, payload_bytes=P.numel() * P.element_size())
        comm.all_reduce(P, step)
        t0 = time.perf_counter()
        Q = torch.empty(r * n, device=m.device)
        qt = Q.view(r, n)
        c.finish(m, p, out=qt)
        if self.error_feedback:
            self.ledgers[key].subtract_product(p, qt, chunk=self.CHUNK)
        log(comm, step, compress_s=time.perf_counter() - t0)
        log(comm, step, payload_bytes=Q.numel() * Q.element_size())
        comm.all_reduce(Q, step)
        t0 = time.perf_counter()
        Q.div_(self.world)
        if c.warm_start:
            c.q = qt.t()
        self._scatter(p, qt, flats, n)
        log(comm, step, decode_s=time.perf_counter() - t0)
        if trace.ENABLED:
            trace.begin(key, flat, c)
            trace.note(step=f"{len(items)} tensors as one {n}x{n} matrix, P and Q of rank {r}, float32")
            trace.end(nbytes=4 * (P.numel() + Q.numel()))

    def _scatter(self, p, qt, flats, n):
        """P Q^T into the items, a few rows at a time (no full-size temporary)."""
        rows = max(1, self.CHUNK // n)
        buf = torch.empty(min(rows, n) * n, device=p.device)
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            chunk = torch.mm(p[r0:r1], qt, out=buf[: (r1 - r0) * n].view(r1 - r0, n)).view(-1)
            lo, hi, off = r0 * n, r1 * n, 0
            for v in flats:
                a, b = max(lo, off), min(hi, off + v.numel())
                if a < b:
                    v[a - off: b - off].copy_(chunk[a - lo: b - lo])
                off += v.numel()

    def probe(self, tensors, link):
        c = copy.deepcopy(self.compressor)
        n = self.side(sum(t.numel() for t in tensors))
        m = torch.zeros(n * n)
        torch.cat([t.reshape(-1).float() for t in tensors], out=m[: sum(t.numel() for t in tensors)])
        t0 = time.perf_counter()
        m = m.view(n, n)
        p = c.project(m)
        q = c.finish(m, p)
        c.expand(p, q)
        nbytes = 4 * (p.numel() + q.numel())
        return time.perf_counter() - t0, 2 * cost.ring_allreduce_time(nbytes // 2, self.world, link)


register("lowrank", LowRank)
register("lowrank-batched", BatchedLowRank)
