"""Error feedback: the old ledger that remembers what was not sent.

Each step, the new gradient is added to the ledger (the residual), the ledger is
compressed and sent, and what was sent is crossed out. Nothing is ever lost: a
small entry waits in the ledger until it has grown big enough to be sent.

    sum of everything sent + residual == sum of every gradient fed in

(tested to float tolerance). With it, biased compressors such as Top-K or Sign
converge at the rate of plain SGD (Stich et al. 2018; Karimireddy et al. 2019).
"""
from __future__ import annotations

import math

import torch

from .checks import check_grad, check_int, check_number, check_ratio
from .compressors import Compressor, TopK
from .ledger import Ledger
from .packet import Packet
from .velocity import Velocity


class ErrorFeedback:
    """Wrap a compressor with a residual memory (one `Ledger` per tensor stream).

    The ledger is kept in float32 (float64 for float64 gradients) whatever the
    gradient's dtype, so that half-precision gradients lose nothing to the ledger's
    own rounding; packets still carry the gradient's dtype. A gradient that is
    refused (non-finite, or beyond what the wire format can carry) leaves the ledger
    exactly as it was.

    >>> from milktea import TopK
    >>> ef = ErrorFeedback(TopK(k=1))
    >>> p = ef.compress(torch.tensor([3.0, 1.0]))
    >>> ef.decompress(p), ef.residual
    (tensor([3., 0.]), tensor([0., 1.]))
    >>> p = ef.compress(torch.tensor([0.0, 1.0]))   # the 1.0 left over has grown to 2.0
    >>> ef.decompress(p)
    tensor([0., 2.])
    """

    def __init__(self, compressor: Compressor):
        if not isinstance(compressor, Compressor):
            raise TypeError(f"ErrorFeedback wraps a milktea Compressor, got {type(compressor).__name__}")
        self.compressor = compressor
        self.ledger = Ledger(check_first=True)
        self.steps = 0

    @property
    def residual(self) -> torch.Tensor | None:
        """What has not been sent yet (the ledger's tensor; None before the first step)."""
        return self.ledger.residual

    @property
    def name(self) -> str:
        return f"{self.compressor.name}+ef"

    def __repr__(self) -> str:
        norm = "empty" if self.residual is None else f"|residual|={float(self.residual.float().norm()):.4g}"
        return f"ErrorFeedback({self.compressor!r}, steps={self.steps}, {norm})"

    def compress(self, grad: torch.Tensor) -> Packet:
        """residual += grad; send C(residual); residual -= what was sent."""
        packet = self.ledger.step(self.compressor, grad)
        self.steps += 1
        return packet

    def compress_rows(self, grads: torch.Tensor) -> list[Packet]:
        """`compress` for W workers at once (grads [W, *shape]; row w of the ledger and of
        the compressor's `encode` is worker w's, as its own copy would have them): the
        simulator's one call per step. A ledger that does more than `Ledger.step` per
        gradient writes its own (EF21, MomentumCorrected and DGC do)."""
        packets = self.ledger.step_rows(self.compressor, grads)
        self.steps += 1
        return packets

    def decompress(self, packet: Packet, out: torch.Tensor | None = None) -> torch.Tensor:
        return self.compressor.decompress(packet, out=out)

    def reset(self) -> None:
        self.ledger.reset()
        self.steps = 0

    def state_dict(self) -> dict:
        state = {"residual": self.ledger.state_dict(), "steps": self.steps}
        if hasattr(self.compressor, "state_dict"):
            state["compressor"] = self.compressor.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.ledger.load_state_dict(state["residual"])
        self.steps = int(state["steps"])
        if "compressor" in state and hasattr(self.compressor, "load_state_dict"):
            self.compressor.load_state_dict(state["compressor"])


def warmup_ratio(step: int, final_ratio: float, warmup_steps: int, start_ratio: float = 0.25) -> float:
    """DGC's sparsity warm-up: the kept share shrinks exponentially to `final_ratio`.

    With start 0.25 and final 0.001 over 4 stages this gives DGC's 25%, 6.25%, 1.56%,
    0.4%, 0.1% schedule.

    >>> [round(warmup_ratio(s, 0.001, 4), 5) for s in range(6)]
    [0.25, 0.06287, 0.01581, 0.00398, 0.001, 0.001]
    """
    check_ratio(final_ratio), check_ratio(start_ratio)
    if warmup_steps <= 0 or step >= warmup_steps:
        return final_ratio
    frac = max(step, 0) / warmup_steps
    return math.exp(math.log(start_ratio) * (1 - frac) + math.log(final_ratio) * frac)


class DGC(ErrorFeedback):
    """Deep Gradient Compression (Lin et al. 2018): Top-K with its four helpers.

    - momentum correction (``momentum_correction=True``): the momentum is accumulated
      locally *before* compression (u = m u + g; v += u), so that the entries waiting in
      the ledger keep their momentum. Train with plain SGD (no optimizer momentum): the
      momentum lives here. Off, the ledger holds gradients and the optimizer's momentum
      acts on the sparse average, where a delayed entry has lost its history.
    - local gradient clipping (``clip``): each worker scales its gradient down to an L2
      norm of at most ``clip`` before it enters the ledger (DGC uses the global threshold
      times N^-1/2), so that a burst cannot fill the ledger with a huge entry.
    - momentum factor masking (``masking=True``): the momentum of the entries just sent is
      cleared, so a stale velocity does not keep pushing them after the update.
    - warm-up (``warmup_steps``): the kept share shrinks from ``start_ratio`` to ``ratio``
      (:func:`warmup_ratio`) in ``warmup_steps`` stages of ``stage_steps`` steps each, the
      share fixed within a stage (DGC's stages are epochs: 4 of them).

    >>> dgc = DGC(ratio=0.5, momentum=0.9)
    >>> dgc.decompress(dgc.compress(torch.tensor([1.0, -2.0])))
    tensor([ 0., -2.])
    >>> DGC(ratio=0.5, clip=1.0).compress(torch.tensor([3.0, 4.0])).nbytes > 0   # scaled to norm 1
    True
    """

    def __init__(self, ratio: float = 0.001, momentum: float = 0.9, warmup_steps: int = 0,
                 start_ratio: float = 0.25, approximate: bool = True, seed: int = 0, *,
                 momentum_correction: bool = True, masking: bool = True, clip: float | None = None,
                 stage_steps: int = 1):
        super().__init__(TopK(ratio, approximate=approximate, seed=seed))
        momentum = check_number(momentum, "momentum", 0.0, 1.0, open_high=True)
        warmup_steps = check_int(warmup_steps, "warmup_steps", 0)
        self.stage_steps = check_int(stage_steps, "stage_steps", 1)
        for name, flag in (("momentum_correction", momentum_correction), ("masking", masking)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {flag!r}")
        self.final_ratio, self.momentum = check_ratio(ratio), momentum
        self.warmup_steps, self.start_ratio = warmup_steps, check_ratio(start_ratio)
        self.momentum_correction, self.masking = momentum_correction, masking
        self.clip = None if clip is None else check_number(clip, "clip", 0, open_low=True)
        self.momentum_state = Velocity(momentum)

    def __repr__(self) -> str:
        return (f"DGC(ratio={self.final_ratio:g}, momentum={self.momentum:g}, "
                f"momentum_correction={self.momentum_correction}, masking={self.masking}, "
                f"clip={self.clip}, warmup_steps={self.warmup_steps}, stage_steps={self.stage_steps}, "
                f"steps={self.steps})")

    def compress(self, grad):
        grad = check_grad(grad, "gradient", self.compressor.nonfinite)
        self.compressor.ratio = warmup_ratio(self.steps // self.stage_steps, self.final_ratio, self.warmup_steps,
                                             self.start_ratio)
        with torch.no_grad():
            if self.clip is not None:
                norm = float(grad.float().norm())
                if norm > self.clip:
                    grad = grad * (self.clip / norm)
            packet = self.ledger.step(self.compressor, self.momentum_state.step(grad) if self.momentum_correction
                                      else grad)
            if self.momentum_correction and self.masking:
                idx, _ = self.compressor.sparse_parts_of(packet)
                self.momentum_state.mask(idx)             # momentum factor masking
        self.steps += 1
        return packet

    def compress_rows(self, grads: torch.Tensor) -> list[Packet]:
        """`compress` for W workers at once (see ErrorFeedback.compress_rows): each row clipped
        on its own, the velocity and the ledger as rows, each row's sent entries masked."""
        grads = check_grad(grads, "gradient", self.compressor.nonfinite)
        self.compressor.ratio = warmup_ratio(self.steps // self.stage_steps, self.final_ratio, self.warmup_steps,
                                             self.start_ratio)
        with torch.no_grad():
            if self.clip is not None:
                rows = []
                for g in grads:
                    norm = float(g.float().norm())
                    rows.append(g * (self.clip / norm) if norm > self.clip else g)
                grads = torch.stack(rows)
            packets = self.ledger.step_rows(self.compressor, self.momentum_state.step(grads)
                                            if self.momentum_correction else grads)
            if self.momentum_correction and self.masking:
                _mask_rows(self.momentum_state, self.compressor, packets)
        self.steps += 1
        return packets

    @property
    def velocity(self) -> torch.Tensor | None:
        """The worker's velocity u (momentum correction; None before the first step)."""
        return self.momentum_state.tensor

    def reset(self) -> None:
        super().reset()
        self.momentum_state.reset()

    def state_dict(self):
        state = super().state_dict()
        state["velocity"] = self.momentum_state.state_dict()
        return state

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.momentum_state.load_state_dict(state["velocity"])


class MomentumCorrected(ErrorFeedback):
    """Error feedback with DGC's momentum correction, for any compressor: each worker keeps a
    velocity u <- m u + g and feeds u, not g, into its ledger; train with no optimizer
    momentum (the momentum lives here). DGC is this with Top-K and its three other helpers.
    `masking`: DGC's momentum factor masking, for a compressor whose packets list their
    positions (Top-K, Random-K): the velocity of the entries just sent is cleared.

    >>> from milktea import Sign
    >>> mc = MomentumCorrected(Sign(), momentum=0.5)
    >>> _ = mc.compress(torch.tensor([1.0, -1.0])); _ = mc.compress(torch.tensor([1.0, -1.0]))
    >>> mc.velocity
    tensor([ 1.5000, -1.5000])
    """

    def __init__(self, compressor: Compressor, momentum: float = 0.9, masking: bool = False):
        super().__init__(compressor)
        self.momentum_state = Velocity(momentum)
        self.momentum = self.momentum_state.momentum
        if not isinstance(masking, bool):
            raise TypeError(f"masking must be True or False, got {masking!r}")
        if masking and not callable(getattr(compressor, "sparse_parts_of", None)):
            raise ValueError(f"masking clears the velocity where a packet sent entries: {compressor!r} does not "
                             f"list its positions (use Top-K or Random-K, or masking=False)")
        self.masking = masking

    @property
    def name(self) -> str:
        return f"{self.compressor.name}+ef+mc"

    @property
    def velocity(self) -> torch.Tensor | None:
        """The worker's velocity u (None before the first step)."""
        return self.momentum_state.tensor

    def compress(self, grad: torch.Tensor) -> Packet:
        grad = check_grad(grad, "gradient", self.compressor.nonfinite)
        packet = self.ledger.step(self.compressor, self.momentum_state.step(grad))
        if self.masking:
            idx, _ = self.compressor.sparse_parts_of(packet)
            self.momentum_state.mask(idx)            # momentum factor masking
        self.steps += 1
        return packet

    def compress_rows(self, grads: torch.Tensor) -> list[Packet]:
        """`compress` for W workers at once (see ErrorFeedback.compress_rows): the velocity
        and the ledger as rows, each row's sent entries masked."""
        grads = check_grad(grads, "gradient", self.compressor.nonfinite)
        packets = self.ledger.step_rows(self.compressor, self.momentum_state.step(grads))
        if self.masking:
            _mask_rows(self.momentum_state, self.compressor, packets)
        self.steps += 1
        return packets

    def reset(self) -> None:
        super().reset()
        self.momentum_state.reset()

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["velocity"] = self.momentum_state.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.momentum_state.load_state_dict(state["velocity"])



def _mask_rows(velocity, compressor, packets) -> None:
    """Momentum factor masking for W rows: row w's velocity cleared where its packet sent."""
    for w, packet in enumerate(packets):
        idx, _ = compressor.sparse_parts_of(packet)
        velocity.mask(idx + w * packet.numel)
