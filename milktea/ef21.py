"""EF21 (Richtárik, Sokolov and Fatkhullin, 2021): error feedback that reports how the
gradient *changed*, not the gradient.

Classic error feedback (`ErrorFeedback`) adds each gradient to the worker's ledger, sends
the compressed ledger, and head office applies the mean of what arrives. EF21 keeps the
same ledger (`milktea.ledger.Ledger`, stepped the same way) but feeds it the change of the
gradient since the worker's last report; head office keeps a running estimate g of the
average gradient, adds to it the mean of what arrives, and steps along g:

    worker i:     c_i = C(grad_i - g_i),   g_i += c_i        the ledger holds grad_i - g_i
    head office:  g   += mean_i c_i,       w   -= lr * g     (g = mean_i g_i at all times)

The ledger holds what head office does not know yet of this worker's gradient. When
training settles it goes to zero, even where each worker's own gradient does not (data
that differ between workers, so that the optimum of the average is nobody's optimum):
classic error feedback's ledger keeps taking in those gradients and paying them out,
which leaves a floor under the error at a constant learning rate (chapter 04 measures it).
EF21 converges like gradient descent, at O(1/T) for smooth non-convex losses with full
gradients, with no bound on the gradients assumed (classic EF: O(1/T^(2/3))).

    >>> import torch
    >>> from milktea import TopK
    >>> ef = EF21(TopK(k=1))
    >>> p = ef.compress(torch.tensor([3.0, 1.0]))        # the first report: the gradient itself
    >>> ef.decompress(p), ef.residual, ef.estimate
    (tensor([3., 0.]), tensor([0., 1.]), tensor([3., 0.]))
    >>> p = ef.compress(torch.tensor([3.0, 1.0]))        # unchanged: what was owed goes out
    >>> ef.decompress(p), ef.estimate
    (tensor([0., 1.]), tensor([3., 1.]))

`milktea.simulate.simulate(task, EF21(TopK(...)), ...)` trains with it: every worker gets
its own copy, and head office keeps the running estimate.
"""
from __future__ import annotations

import torch

from .checks import check_grad
from .compressors import Compressor
from .feedback import ErrorFeedback
from .packet import Packet


class EF21(ErrorFeedback):
    """One worker's side of EF21 around `compressor` (any milktea compressor).

    `last`: the gradient this worker reported on last (None before its first report);
    `residual`: the ledger, last - estimate; `estimate`: g_i, what head office holds of
    this worker's gradient. Packets carry the ledger's dtype (float32, float64 for float64
    gradients): the change of a gradient is kept at the ledger's precision.
    """

    accumulates = True     # head office adds each round's mean to its running estimate g

    def __init__(self, compressor: Compressor):
        super().__init__(compressor)
        self.last: torch.Tensor | None = None

    @property
    def name(self) -> str:
        return f"{self.compressor.name}+ef21"

    def __repr__(self) -> str:
        return f"EF21({self.compressor!r})"

    @property
    def estimate(self) -> torch.Tensor | None:
        """g_i: what head office knows of this worker's gradient (None before the first report)."""
        return None if self.last is None else self.last - self.residual

    def compress(self, grad: torch.Tensor) -> Packet:
        return self._report(grad, self.ledger.step, "this EF21 worker reported a {} gradient before, got {}: "
                            "keep one EF21 per tensor, or reset() it")

    def compress_rows(self, grads: torch.Tensor) -> list[Packet]:
        """`compress` for W workers at once (see ErrorFeedback.compress_rows): each row's
        change since its last report through the ledger's rows."""
        return self._report(grads, self.ledger.step_rows, "these EF21 workers reported {} gradients before, got {}")

    def _report(self, grads: torch.Tensor, step, mismatch: str):
        """The change since the last report through `step` (the ledger's one write: residual
        += change; send; cross out); the gradient is remembered as the new last report."""
        grads = check_grad(grads, "gradient", self.compressor.nonfinite)
        with torch.no_grad():
            g = grads.detach().to(self.ledger.dtype_for(grads.dtype))
            if self.last is not None and self.last.shape != g.shape:
                raise ValueError(mismatch.format(tuple(self.last.shape), tuple(g.shape)))
            change = g.clone() if self.last is None else g - self.last
            sent = step(self.compressor, change)
            self.last = g.clone()
        self.steps += 1
        return sent

    def reset(self) -> None:
        super().reset()
        self.last = None

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["last"] = None if self.last is None else self.last.clone()
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        last = state.get("last")
        self.last = None if last is None else last.clone()
