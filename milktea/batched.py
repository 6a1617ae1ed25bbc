"""Every worker's packet in one call: the simulator's fast path.

The simulator holds all N workers' gradients as one [N, n] matrix. Compressing them one
worker at a time costs N rounds of small torch calls, which at N=64 and a small model
is most of a step. For Top-K (exact), Random-K, Sign and absmax Quantize (round to
nearest) the same arithmetic runs on the whole matrix at once, row by row, and gives
bit for bit what each worker's own `compress`, `subtract_sent` and `aggregate` give
(the tests compare the two on every one of them, with and without error feedback, classic
or EF21):

- the same elementwise operations in the same order, on rows instead of vectors;
- Top-K keeps the same set (the k largest |x|, ties to the lowest index), whatever
  path the per-worker selector takes;
- the sum over workers is added in worker order, as `aggregate` adds packet after packet;
- each packet's exact size (Top-K's index encoding is chosen per worker) is computed
  from the same formulas as the packet's own.

A compressor of your own joins this path by defining `compress_batch(X, shape,
error_feedback)` (see `Custom` below); other compressors, and tensors large enough for
the numba kernels, go per worker.

    >>> import torch
    >>> from milktea import TopK
    >>> senders = [TopK(k=1).fork(w) for w in range(2)]
    >>> total, sizes = batch_for(senders, (3,))(torch.tensor([[1., -5., 2.], [4., 0., 1.]]))
    >>> total
    tensor([ 4., -5.,  0.])
"""
from __future__ import annotations

import functools

import torch

from . import index as index_codec
from .bits import packed_size
from .compressors import Quantize, RandomK, Sign, TopK
from .compressors.sparse import _random_indices
from .ef21 import EF21
from .feedback import ErrorFeedback
from .kernels import scale_cap, would_use_numba
from .packet import varint_size

_LIMITS = [1 << (7 * j) for j in range(1, 5)]


@functools.lru_cache(maxsize=4096)
def _header(shape, params, part_lengths) -> int:
    """Packet.header_nbytes for these fields (see milktea.packet)."""
    n = 5 + varint_size(len(shape)) + sum(varint_size(int(d)) for d in shape)
    n += varint_size(len(params)) + sum(varint_size(int(v)) for v in params)
    return n + varint_size(len(part_lengths)) + sum(varint_size(int(p)) for p in part_lengths)


def _fold(D: torch.Tensor) -> torch.Tensor:
    """D[0] + D[1] + ... added in row order, as `Compressor.aggregate` adds packets."""
    total = D[0].clone()
    for row in D[1:]:
        total += row
    return total


class _Batch:
    def __init__(self, senders, shape, codec):
        self.senders, self.shape, self.codec = senders, tuple(shape), codec
        self.ef = isinstance(senders[0], ErrorFeedback)
        self.R: torch.Tensor | None = None        # the workers' ledgers, one row each
        # EF21 (milktea.ef21) feeds its ledger the change since the last report: the rows it reported on
        self.ef21 = isinstance(senders[0], EF21)
        self.L: torch.Tensor | None = None

    def __call__(self, G: torch.Tensor):
        """G: [workers, n] gradients. Returns (sum over workers of what they send, [n];
        each worker's packet size in bytes)."""
        X = G
        if self.ef:
            if self.R is None:                   # the ledgers become rows of one matrix
                self.R = torch.zeros_like(G)
                for w, s in enumerate(self.senders):
                    if s.residual is not None:
                        self.R[w] = s.residual.reshape(-1)
                    s.residual = self.R[w].view(self.shape)
            if self.ef21:
                if self.L is None:
                    self.L = torch.zeros_like(G)
                    for w, s in enumerate(self.senders):
                        if s.last is not None:
                            self.L[w] = s.last.reshape(-1)
                        s.last = self.L[w].view(self.shape)
                self.R.add_(G - self.L)          # as EF21.compress: the change, then the ledger's step
                self.L.copy_(G)
            else:
                self.R.add_(G)
            X = self.R
            for s in self.senders:
                s.steps += 1
        return self.run(X)


class _TopK(_Batch):
    def run(self, X):
        W, n = X.shape
        codec = self.codec
        k = codec.k_for(n)
        A = X.abs()
        if k >= n:
            idx = torch.arange(n, device=X.device).expand(W, n)
        else:
            kth = (A.topk(k, dim=1, sorted=True).values[:, -1:] if k <= 1024 or X.device.type != "cpu"
                   else A.kthvalue(n - k + 1, dim=1, keepdim=True).values)
            keep = A >= kth
            extra = keep.sum(1) > k              # ties at the k-th value: keep the lowest indices
            if bool(extra.any()):
                gt, eq = A > kth, A == kth
                need = k - gt.sum(1, keepdim=True)
                keep = gt | (eq & (eq.cumsum(1) <= need))
            idx = keep.nonzero()[:, 1].view(W, k)
        vals = X.gather(1, idx)
        total = torch.zeros(n, dtype=X.dtype, device=X.device)
        if X.device.type == "cpu":               # index_add_ on a CPU vector adds in index order
            total.index_add_(0, idx.reshape(-1), vals.reshape(-1))
        else:
            for w in range(W):
                total.index_add_(0, idx[w], vals[w])
        if self.ef:
            X.scatter_(1, idx, 0)
        return total, self._sizes(idx, n, k, X.element_size())

    def _sizes(self, idx, n, k, elsize):
        W = idx.shape[0]
        prev = torch.cat([torch.full((W, 1), -1, dtype=idx.dtype, device=idx.device), idx[:, :-1]], 1)
        g = idx - prev - 1
        limits = torch.tensor(_LIMITS, dtype=g.dtype, device=g.device)
        table = torch.stack([torch.full((W,), 4 * k, dtype=torch.int64, device=g.device),
                             k + (g // index_codec.ESCAPE).sum(1),
                             (torch.bucketize(g, limits, right=True) + 1).sum(1),
                             torch.full((W,), packed_size(n, 1), dtype=torch.int64, device=g.device)], 1)
        if self.codec.index == "auto":
            enc = table.argmin(1)                # the first of equal sizes, as encode() picks
        else:
            enc = torch.full((W,), index_codec.ENCODINGS.index(self.codec.index), device=g.device)
        ilen = table.gather(1, enc[:, None])[:, 0]
        vlen = k * elsize
        return [_header(self.shape, (k, e), (i, vlen)) + i + vlen for e, i in zip(enc.tolist(), ilen.tolist())]


class _RandomK(_Batch):
    def run(self, X):
        W, n = X.shape
        comps = [s.compressor if self.ef else s for s in self.senders]
        seed = comps[0]._step_seed()
        k = comps[0].k_for(n)
        idx = _random_indices(n, k, seed, X.device)
        for c in comps:
            c.step += 1
        vals = X.index_select(1, idx)
        total = torch.zeros(n, dtype=X.dtype, device=X.device)
        if X.device.type == "cpu":
            total.index_add_(0, idx.repeat(W), vals.reshape(-1))
        else:
            for w in range(W):
                total.index_add_(0, idx, vals[w])
        if self.ef:
            X.index_fill_(1, idx, 0)
        vlen = k * X.element_size()
        return total, [_header(self.shape, (k, seed), (vlen,)) + vlen] * W


class _Sign(_Batch):
    def run(self, X):
        W, n = X.shape
        # as Sign does: sum |x| in float64 (row by row, the same reduction as one worker's),
        # / n in double, then float32; exact zeros of either sign are sent as +scale
        l1 = [float(row.abs().sum(dtype=torch.float64)) for row in X]
        scale = torch.tensor([v / n for v in l1], dtype=torch.float32, device=X.device)[:, None]
        D = torch.where(X < 0, -scale, scale)
        if self.ef:
            X -= D
        size = _header(self.shape, (), (packed_size(n, 1), 4)) + packed_size(n, 1) + 4
        return _fold(D), [size] * W


class _Quantize(_Batch):
    def run(self, X):
        W, n = X.shape
        codec = self.codec
        qmax, bits = codec.qmax, codec.bits
        chunk = n if codec.chunk is None else min(codec.chunk, n)
        full = n - n % chunk
        D = torch.empty_like(X)
        pieces = [(X[:, :full].reshape(W, -1, chunk), D[:, :full].view(W, -1, chunk))] if full else []
        if full < n:
            pieces.append((X[:, full:].reshape(W, 1, -1), D[:, full:].view(W, 1, -1)))
        for xv, dv in pieces:       # the operations of kernels.quantize and kernels.dequantize
            sv = (torch.linalg.vector_norm(xv, float("inf"), dim=2) / qmax).clamp_(max=scale_cap(qmax))
            div = torch.where(sv > 0, sv, 1.0).unsqueeze(2)
            y = torch.div(xv, div).add_(qmax + 1.5)
            dv.copy_(y.to(torch.int32))            # the code, as a float
            dv.sub_(qmax + 1).mul_(sv.unsqueeze(2))
        if self.ef:
            X -= D
        nch = (n + chunk - 1) // chunk
        size = packed_size(n, bits) + 4 * nch
        return _fold(D), [_header(self.shape, (bits, chunk, 0), (packed_size(n, bits), 4 * nch)) + size] * W


class Custom(_Batch):
    """A compressor's own batched path: `compress_batch(X, shape, error_feedback)`, called
    on worker 0's copy with X, the [workers, n] gradients (with error feedback: the
    workers' ledgers, the gradients added already). It returns (the sum over rows, in row
    order, of what each row's packet decodes to, flat; each row's packet.nbytes) and, with
    error feedback, subtracts from each row of X what its packet carries, in place. It
    must give the bits one compress per worker gives (compare simulate(..., batched=False)),
    so define it only where the workers' copies hold no state of their own (a random stream).
    """

    def run(self, X):
        total, sizes = self.codec.compress_batch(X, self.shape, self.ef)
        if total.shape != (X.shape[1],) or len(sizes) != X.shape[0]:
            raise ValueError(f"{type(self.codec).__name__}.compress_batch returned a sum of shape "
                             f"{tuple(total.shape)} and {len(sizes)} sizes; expected ({X.shape[1]},) and {X.shape[0]}")
        return total, [int(s) for s in sizes]


def batch_for(senders, shape):
    """A batched stand-in for these per-worker senders of one stream (each a compressor
    or an ErrorFeedback around one), or None when they must run one by one. Call it with
    the [workers, n] gradients: (sum of what the workers send, per-worker packet bytes)."""
    first = senders[0]
    if type(first) in (ErrorFeedback, EF21) and all(type(s) is type(first) for s in senders):
        comps = [s.compressor for s in senders]
    elif isinstance(first, ErrorFeedback):
        return None                              # DGC and other ledgers do more than add
    else:
        comps = senders
    c = comps[0]
    if c.nonfinite != "raise" or any(type(x) is not type(c) for x in comps):
        return None
    n = 1
    for d in shape:
        n *= d
    if type(c) is TopK and not c.approximate:
        return _TopK(senders, shape, c)
    if type(c) is RandomK and len({x.step for x in comps}) == 1 and len({x.seed for x in comps}) == 1:
        return _RandomK(senders, shape, c)
    if type(c) is Sign:
        return _Sign(senders, shape, c)
    if type(c) is Quantize and not c.stochastic:
        return _Quantize(senders, shape, c)
    if callable(getattr(c, "compress_batch", None)):
        return Custom(senders, shape, c)
    return None


def supported(G: torch.Tensor, batch) -> bool:
    """Whether `batch` can take these gradients this step (else: per worker, which also
    reports non-finite values as the compressors do)."""
    # one reduction: NaN/Inf make the sum non-finite (an overflowing sum only costs a full check)
    if batch is None or not (bool(torch.isfinite(G.sum())) or bool(torch.isfinite(G).all())):
        return False
    if isinstance(batch, (_Sign, _Quantize)):
        return G.dtype == torch.float32 and not would_use_numba(G.shape[1], G.device)
    return G.dtype in (torch.float32, torch.float64)


__all__ = ["batch_for", "supported"]
