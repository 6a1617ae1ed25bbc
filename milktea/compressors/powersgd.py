"""PowerSGD (Vogels et al. 2019): send a rank-r factorisation P Q^T of the gradient.

A gradient of shape (rows, ...) is viewed as a matrix M (rows x cols). One step of
power iteration: P = M Q, orthonormalise P, Q = M^T P; the receiver forms P Q^T,
the projection of M onto span(P). With ``warm_start`` Q is kept for the next step,
so repeated steps converge to the best rank-r approximation.

In data-parallel training the two products are separated by all-reduces (of P,
then of Q); the phases are exposed for that as :meth:`project`, :meth:`finish` and
:meth:`expand`. One-dimensional tensors are sent uncompressed, as in PyTorch's hook.
Packet (codec ``powersgd``): params = (rows, cols, rank), parts = (P, Q) as float32;
rank 0 means a dense float32 payload.

``batched=True`` is PyTorch's ``batched_powerSGD_hook``: in the DDP hook, every tensor
of a bucket (biases too) is packed into one zero-padded square matrix of side
ceil(sqrt(numel)), compressed with one P and one Q (protocol ``lowrank-batched``).
Far fewer bytes (2 x side x rank floats per bucket), a coarser approximation.
:meth:`compress` on one tensor is the same for both forms.
"""
from __future__ import annotations

import torch

from ..checks import check_positive_int, check_seed
from .base import Compressor
from .packet import Packet
from .registry import library_codec
from .wire import expect_layout, expect_nbytes, from_bytes, output, to_bytes


def orthonormalize(p: torch.Tensor) -> torch.Tensor:
    """Orthonormal columns spanning p (reduced QR; zero columns stay harmless)."""
    q, r = torch.linalg.qr(p)
    # make the basis deterministic: QR's sign choice differs between backends
    signs = torch.sign(torch.diagonal(r))
    signs[signs == 0] = 1
    return q * signs


class PowerSGD(Compressor):
    """Low-rank compression by one power-iteration step per call.

    >>> m = torch.outer(torch.arange(1., 5.), torch.arange(1., 4.))   # rank 1
    >>> ps = PowerSGD(rank=1)
    >>> torch.allclose(ps.decompress(ps.compress(m)), m, atol=1e-5)
    True
    >>> PowerSGD(rank=4, batched=True).protocol     # a bucket's tensors as one matrix in DDP
    'lowrank-batched'
    """
    codec = "powersgd"
    protocol = "lowrank"
    biased = True

    def __init__(self, rank: int = 1, warm_start: bool = True, seed: int = 0, nonfinite: str = "raise",
                 batched: bool = False):
        super().__init__(nonfinite)
        self.rank = check_positive_int(rank, "rank")
        self.warm_start = bool(warm_start)
        if not isinstance(batched, bool):
            raise TypeError(f"batched must be True or False, got {batched!r}")
        self.batched = batched
        if batched:
            self.protocol = "lowrank-batched"
        self.seed = check_seed(seed)
        self.q: torch.Tensor | None = None

    @property
    def name(self) -> str:
        return f"powersgd-r{self.rank}" + ("-batched" if self.batched else "")

    def _repr_args(self):
        return {"rank": self.rank, "warm_start": self.warm_start, **({"batched": True} if self.batched else {})}

    @staticmethod
    def as_matrix(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(t.shape[0], -1).float()

    def _rank_for(self, m: torch.Tensor) -> int:
        return min(self.rank, m.shape[0], m.shape[1])

    def _init_q(self, m: torch.Tensor) -> torch.Tensor:
        r = self._rank_for(m)
        if self.warm_start and self.q is not None and self.q.shape == (m.shape[1], r):
            return self.q.to(m.device)
        g = torch.Generator().manual_seed(self.seed)
        return torch.randn(m.shape[1], r, generator=g).to(m.device)

    # -- the phases a distributed hook interleaves with all-reduces -------------
    def project(self, m: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """P = M Q (to be summed over workers), into `out` (rows x rank) if given."""
        return torch.mm(m, self._init_q(m), out=out) if out is not None else m @ self._init_q(m)

    def finish(self, m: torch.Tensor, p: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Orthonormalise the (summed) P in place and return Q = M^T P (to be summed).

        Q is computed as (P^T M)^T: the same numbers, but one pass over M in its own
        layout (M^T P walks a transposed M, ~10x slower on a tall matrix). `out`: a
        contiguous rank x cols buffer for Q^T (the returned Q is its transpose, a view,
        kept as the warm start without a copy: the caller owns it)."""
        p.copy_(orthonormalize(p))
        if out is not None:
            q = torch.mm(p.t(), m, out=out).t()
        else:
            q = (p.t() @ m).t()
        if self.warm_start:
            self.q = q.detach() if out is not None else q.detach().clone()
        return q

    @staticmethod
    def expand(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return p @ q.t()

    def _compress(self, t):
        shape = tuple(t.shape)
        if t.dim() < 2 or self._rank_for(self.as_matrix(t)) * sum(self.as_matrix(t).shape) >= t.numel():
            dense = t.reshape(-1).float()
            return Packet("powersgd", shape, t.dtype, (t.numel(), 1, 0), (to_bytes(dense).clone(),))
        m = self.as_matrix(t)
        p = self.project(m)
        q = self.finish(m, p)
        return Packet("powersgd", shape, t.dtype, (m.shape[0], m.shape[1], p.shape[1]),
                      (to_bytes(p), to_bytes(q)))

    def state_dict(self):
        return {**super().state_dict(), "q": None if self.q is None else self.q.clone()}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        q = state.get("q")
        if q is not None and (not isinstance(q, torch.Tensor) or q.dim() != 2 or not 1 <= q.shape[1] <= self.rank):
            raise ValueError(f"the saved warm start must be a matrix of at most {self.rank} columns "
                             f"(this PowerSGD's rank), got {q!r:.60}")
        self.q = None if q is None else q.clone()


def _factors(packet):
    """(P, Q) of a powersgd packet, or (values, None) for a dense one; sizes checked."""
    expect_layout(packet, 3, 1 if len(packet.params) == 3 and packet.params[2] == 0 else 2)
    rows, cols, rank = packet.params
    n = packet.numel
    if rows * cols != n or (rank and rank > min(rows, cols)):
        raise ValueError(f"malformed powersgd packet: a {rows}x{cols} rank-{rank} matrix for a tensor "
                         f"of {n} elements (rows * cols == numel, rank <= min(rows, cols))")
    if rank == 0:
        expect_nbytes(packet, 0, 4 * n, f"{n} float32 values")
        return from_bytes(packet.parts[0], torch.float32), None
    expect_nbytes(packet, 0, 4 * rows * rank, f"P ({rows}x{rank} float32)")
    expect_nbytes(packet, 1, 4 * cols * rank, f"Q ({cols}x{rank} float32)")
    return (from_bytes(packet.parts[0], torch.float32).view(rows, rank),
            from_bytes(packet.parts[1], torch.float32).view(cols, rank))


def _decode_powersgd(packet, out=None):
    p, q = _factors(packet)
    res = output(packet, out)
    if q is None:
        res.view(-1).copy_(p)
    else:
        res.view(p.shape[0], q.shape[0]).copy_(PowerSGD.expand(p, q))
    return res


def _add_powersgd(packet, out, alpha):
    p, q = _factors(packet)
    if q is None:
        out.view(-1).add_(p.to(packet.dtype).to(out.dtype), alpha=alpha)
    elif out.dtype == torch.float32 and packet.dtype == torch.float32:
        out.view(p.shape[0], q.shape[0]).addmm_(p, q.t(), alpha=alpha)     # no full-size temporary
    else:
        out.view(p.shape[0], q.shape[0]).add_(PowerSGD.expand(p, q).to(packet.dtype).to(out.dtype), alpha=alpha)


def _powersgd_cost(compressor, shape, dtype) -> int:
    """float32 P and Q of the matrix (rows x the rest), or the float32 values where the
    factors would not be smaller."""
    n = 1
    for d in shape:
        n *= d
    if len(shape) < 2:
        return 4 * n
    rows, cols = shape[0], n // shape[0]
    r = min(compressor.rank, rows, cols)
    return 4 * r * (rows + cols) if r * (rows + cols) < n else 4 * n


POWERSGD = library_codec(PowerSGD, 8, 1 << 16, _decode_powersgd, add=_add_powersgd, cost=_powersgd_cost, schemes={
    "powersgd": ("PowerSGD r{rank}+EF", lambda ratio, rank: PowerSGD(rank), True),
    # one square matrix per bucket, as PyTorch's batched_powerSGD_hook
    "powersgd-batched": ("PowerSGD r{rank} batched+EF", lambda ratio, rank: PowerSGD(rank, batched=True), True)})
