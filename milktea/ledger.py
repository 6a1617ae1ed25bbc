"""The ledger: error feedback's memory of what one tensor stream has not sent yet.

One class for every error-feedback path in the library: `ErrorFeedback` (so the
simulator and both sides of the compressed all-reduce) and the DDP hook's protocols
keep their ledgers in a `Ledger`, and step it the same way:

    residual += gradient;  packet = C(residual);  residual -= what the packet carries

so that the simulator and the hook remember exactly the same thing for the same
gradients (tested bit for bit, bfloat16 included).

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

from .checks import check_grad
from .compressors.wire import PIECE


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

    def step(self, compressor, grad: torch.Tensor, *, clear_grad: bool = False):
        """residual += grad; return the packet of the residual (in grad's dtype); residual -=
        what the packet carries. clear_grad: zero `grad` once it is in the ledger (the DDP
        hook writes the mean into the gradient's buffer next)."""
        if self.check_first:
            grad = check_grad(grad, "gradient", compressor.nonfinite)
        fresh = self.residual is None
        r = self.tensor_for(grad)
        try:
            self._check_room(r, grad, compressor)
            with torch.no_grad():
                return compressor.compress_with_feedback(r, dtype=grad.dtype, grad=grad, clear_grad=clear_grad)
        except Exception:
            if fresh:                 # e.g. k larger than the tensor: no ledger yet
                self.residual = None
            raise

    @staticmethod
    def _check_room(r: torch.Tensor, grad: torch.Tensor, compressor) -> None:
        """Refuse, before touching the ledger, a gradient that would push it beyond what
        the wire format carries (checked piece by piece: no full-size temporary)."""
        limit = compressor.overflow_at
        if limit == float("inf"):
            return
        rf, gf = r.view(-1), grad.detach().reshape(-1)
        finite_only = compressor.nonfinite == "ignore"     # NaN and inf pass as they are
        for s in range(0, rf.numel(), PIECE):
            x = (rf[s:s + PIECE] + gf[s:s + PIECE]).abs()
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
