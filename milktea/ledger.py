"""The ledger: error feedback's memory of what one tensor stream has not sent yet.

One class for every error-feedback path in the library, and `Ledger.step` its only
write: `ErrorFeedback` (so both sides of the compressed all-reduce), the simulator (one
ledger of W rows for W workers), the DDP hook's protocols, local steps' reports, all
step their ledgers the same way:

    residual += gradient;  packets = C.encode(residual);  residual -= what they carry

so that the simulator and the hook remember exactly the same thing for the same
gradients (tested bit for bit, bfloat16 included). PowerSGD's step is split by an
all-reduce between its two products: `add`, then `subtract_product`.

The ledger is float32 for float32, float16 and bfloat16 gradients (float64 stays
float64), whatever the model's dtype: a ledger exists to remember entries too small
to be sent yet, and a bfloat16 ledger (8 significant bits) would round an entry away
once the ledger holds one 256 times larger. The packet still carries the gradient's
dtype, so the wire costs the same; what the rounding to that dtype leaves out stays in
the ledger. A gradient that would push the ledger beyond what the wire format carries
(`compressor.overflow_at`, 65520 for float16) is refused before it is added.

>>> import torch
>>> from milktea import TopK
>>> ledger = Ledger()
>>> packet = ledger.step(TopK(k=1), torch.tensor([3.0, 1.0], dtype=torch.bfloat16))
>>> ledger.residual                     # float32, though the gradient was bfloat16
tensor([0., 1.])
"""
from __future__ import annotations

import torch

from . import kernels, trace
from .checks import check_grad
from .compressors.codec import lookup
from .compressors.registry import decode_add


def use_ledger(compressor, error_feedback: bool | None = None) -> bool:
    """Whether `compressor` runs with error feedback: `error_feedback` when it is True or
    False, else (None) the compressor's own `biased`: a compressor that drops information
    systematically (Top-K, Random-K, Sign, round-to-nearest Quantize, PowerSGD, a Chain)
    gets a ledger, an unbiased one (QSGD, TernGrad, stochastic Quantize, Cast, Identity)
    does not, nor does no compressor. The one default of `milktea.ddp.compress`,
    `simulate`, `schemes.register` and the command lines' registered schemes.

    >>> from milktea import QSGD, TopK
    >>> use_ledger(TopK(0.01)), use_ledger(QSGD()), use_ledger(QSGD(), True), use_ledger(None)
    (True, False, True, False)
    """
    if error_feedback is None:
        return compressor is not None and bool(getattr(compressor, "biased", False))
    if not isinstance(error_feedback, bool):
        raise TypeError(f"error_feedback must be True, False or None (follow the compressor's `biased`), "
                        f"got {error_feedback!r}")
    return error_feedback


class Ledger:
    """What one tensor stream has not sent yet (`residual`, None before the first step).

    check_first: check the gradient for NaN and infinity before it touches the ledger, so
        that a refused gradient leaves the ledger exactly as it was (one more read of the
        gradient). False lets a compressor that adds the gradient in its own pass find them
        there (Top-K, Sign): faster, and the finite part of a refused gradient has reached
        the ledger when the error is raised. The DDP hook, which stops at the first error,
        uses False; `ErrorFeedback` uses True.
    """

    def __init__(self, check_first: bool = True):
        self.check_first = bool(check_first)
        self.residual: torch.Tensor | None = None

    @staticmethod
    def dtype_for(dtype: torch.dtype) -> torch.dtype:
        """The ledger's dtype for gradients of `dtype`: float64 stays, the rest is float32."""
        return torch.float64 if dtype == torch.float64 else torch.float32

    def tensor_for(self, grad: torch.Tensor) -> torch.Tensor:
        """The residual, made (zeros) at the first gradient; later gradients must match it."""
        r, dtype = self.residual, self.dtype_for(grad.dtype)
        if r is None:
            self.residual = torch.zeros(grad.shape, dtype=dtype, device=grad.device)
        elif r.shape != grad.shape or r.dtype != dtype or r.device != grad.device:
            raise ValueError(f"this ledger holds a {tuple(r.shape)} {r.dtype} tensor on {r.device}; got a "
                             f"{tuple(grad.shape)} {grad.dtype} gradient on {grad.device}. Keep one ledger "
                             f"per tensor, or reset() it")
        return self.residual

    def step(self, compressor, grad: torch.Tensor, *, clear_grad: bool = False, into=None):
        """residual += grad; return the packet of the residual (in grad's dtype); residual -=
        what the packet carries. clear_grad: zero `grad` once it is in the ledger (the DDP
        hook writes the mean into the gradient's buffer next). into: lent to the
        compressor's `encode` (a buffer for the packet's largest part)."""
        return self._step(compressor, grad, False, clear_grad, into)[0]

    def step_rows(self, compressor, grads: torch.Tensor) -> list:
        """`step` for W tensor streams at once: grads [W, *shape] (row w: worker w's gradient),
        the residual [W, *shape]; one packet per row, through one `encode` call."""
        return self._step(compressor, grads, True, False, None)

    def _step(self, compressor, grad, rows, clear_grad, into):
        if self.check_first:
            grad = check_grad(grad, "gradient", compressor.nonfinite)
        if trace.ENABLED:
            trace.note(ledger="Ledger.step")
        r = self.residual
        fresh = r is None
        if fresh or r.shape != grad.shape or r.device != grad.device or \
                r.dtype != (torch.float64 if grad.dtype == torch.float64 else torch.float32):
            r = self.tensor_for(grad)
        R, G = (r, grad.detach()) if rows else (r.unsqueeze(0), grad.detach().unsqueeze(0))
        try:
            if compressor.overflow_at != float("inf"):
                self._check_room(r, grad, compressor)
            if G.dtype == R.dtype:       # the codec adds the gradient (in its own pass, where it can)
                X = R
                packets, sent = compressor.encode(R, add=G, clear_add=clear_grad, into=into)
            else:                        # a half-precision gradient: its packet of the rounded ledger
                R.add_(check_grad(G, "gradient", compressor.nonfinite).to(R.dtype))
                if clear_grad:
                    G.zero_()
                X = R.to(G.dtype)
                packets, sent = compressor.encode(X, into=into)
            if len(sent) == 1 and sent[0] is not None and sent[0][1] is None and X is R:
                kernels.zero_at(R.view(-1), sent[0][0])    # one row of a sparse packet: the hook's
            else:
                self._cross_out(R, X, packets, sent)
        except Exception:
            if fresh:                 # e.g. k larger than the tensor: no ledger yet
                self.residual = None
            raise
        return packets

    @staticmethod
    def _cross_out(R, X, packets, sent) -> None:
        """R -= what each row's packet carried: the positions a sparse packet sent as they
        were zeroed (or their rounding to the wire's dtype left), anything else decoded and
        subtracted (several rows at once where their codec decodes them at once)."""
        W = len(packets)
        if W > 1 and all(s is None for s in sent):
            rows = lookup(packets[0].codec).rows
            D = rows(packets) if rows is not None and lookup(packets[0].codec).sparse is None else None
            if D is not None:
                R.sub_(D.view(R.shape).to(R.dtype))
                return
        if W > 1 and X is R and all(s is not None and s[1] is None for s in sent) \
                and len({s[0].numel() for s in sent}) == 1:
            R.view(W, -1).scatter_(1, torch.stack([s[0] for s in sent]), 0)
            return
        for w, packet in enumerate(packets):
            flat = R[w].view(-1)
            if sent[w] is None:
                decode_add(packet, R[w], -1.0)
                continue
            idx, vals = sent[w]
            if vals is None and X is R:
                kernels.zero_at(flat, idx)
            else:
                vals = X[w].reshape(-1).index_select(0, idx) if vals is None else vals
                flat.index_add_(0, idx, vals.to(flat.dtype), alpha=-1)

    def add(self, grad: torch.Tensor) -> torch.Tensor:
        """residual += grad (checked as `step` checks it); return the residual. For a step
        that an all-reduce splits in two (PowerSGD: P = M Q all-reduced before Q = M^T P):
        the protocol computes from the residual, then calls `subtract_product`."""
        if self.check_first:
            grad = check_grad(grad, "gradient")
        r = self.tensor_for(grad)
        with torch.no_grad():
            r.add_(grad.detach().to(r.dtype))
        return r

    def subtract_product(self, p: torch.Tensor, qt: torch.Tensor, chunk: int = kernels.TORCH_PIECE) -> None:
        """residual -= P Q^T (the residual seen as rows x rest), a block of rows at a time:
        what a low-rank packet carried."""
        m = self.residual.view(p.shape[0], -1)
        p, qt = p.to(m.dtype), qt.to(m.dtype)
        rows = max(1, chunk // max(1, m.shape[1]))
        with torch.no_grad():
            for r0 in range(0, m.shape[0], rows):
                m[r0: r0 + rows].addmm_(p[r0: r0 + rows], qt, alpha=-1)

    @staticmethod
    def _check_room(r: torch.Tensor, grad: torch.Tensor, compressor) -> None:
        """Refuse, before touching the ledger, a gradient that would push it beyond what
        the wire format carries (checked piece by piece: no full-size temporary)."""
        limit = compressor.overflow_at
        if limit == float("inf"):
            return
        rf, gf = r.view(-1), grad.detach().reshape(-1)
        finite_only = compressor.nonfinite == "ignore"     # NaN and inf pass as they are
        step = kernels.piece(rf.device)
        for s in range(0, rf.numel(), step):
            x = (rf[s:s + step] + gf[s:s + step]).abs()
            if finite_only:
                x = torch.where(torch.isfinite(x), x, 0.0)
            peak = float(x.max())
            if peak >= limit:
                raise ValueError(f"ledger + gradient reaches |x| = {peak:g}, which {compressor!r} cannot "
                                 f"send (|x| < {limit:g}); the ledger is left unchanged. Use "
                                 f"Cast(torch.bfloat16), or scale the gradient down")

    def reset(self) -> None:
        self.residual = None

    def state_dict(self) -> torch.Tensor | None:
        return None if self.residual is None else self.residual.clone()

    def load_state_dict(self, residual: torch.Tensor | None, device=None) -> None:
        """Restore what `state_dict` returned, in the ledger's dtype (see `dtype_for`)."""
        if residual is None:
            self.residual = None
            return
        dev = residual.device if device is None else device
        self.residual = residual.to(device=dev, dtype=self.dtype_for(residual.dtype), copy=True)

    def __repr__(self) -> str:
        if self.residual is None:
            return "Ledger(empty)"
        return f"Ledger({tuple(self.residual.shape)} {self.residual.dtype}, |residual|={float(self.residual.norm()):.4g})"
