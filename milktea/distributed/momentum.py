"""Momentum correction for any DDP communication hook (DGC's first technique, chapter 04).

With a biased compressor and error feedback, the optimizer's momentum meets updates that
arrive late and in lumps. Momentum correction moves the momentum before the compressor: each
worker keeps its own velocity u <- m u + g per bucket and hands u, not g, to the hook (whose
ledger then accumulates velocities); the optimizer runs without momentum. What is sent, summed
over time, is what dense momentum SGD would have applied. Factor masking (clearing u where
Top-K sent) is not done here: it needs the positions, which only the compressor knows.

    state = hooks.CompressionState(ddp_model, TopK(0.01), error_feedback=True)
    ddp_model.register_comm_hook(MomentumCorrection(state.hook, momentum=0.9), call)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.05, momentum=0.0)   # the momentum lives in the hook
"""
from __future__ import annotations

import torch

from milktea.checks import check_number


class MomentumCorrection:
    """Wraps a hook (`inner(bucket) -> Future`): the bucket's gradients are replaced by the
    worker's velocity m u + g before `inner` sees them. One velocity per bucket index (a
    bucket rebuilt with another size starts a new one).

    >>> from milktea.experiments.commhook import FakeBucket
    >>> seen = []
    >>> mc = MomentumCorrection(lambda b: seen.append(b.buffer().clone()), momentum=0.5)
    >>> _ = mc(FakeBucket(torch.ones(2))); _ = mc(FakeBucket(torch.ones(2)))
    >>> seen[-1]                                  # 0.5 * 1 + 1
    tensor([1.5000, 1.5000])
    """

    def __init__(self, inner, momentum: float):
        if not callable(inner):
            raise TypeError(f"inner must be a hook callable inner(bucket) -> Future, got {type(inner).__name__}")
        self.inner = inner
        self.momentum = check_number(momentum, "momentum", 0.0, 1.0, open_high=True)
        self.velocity: dict[int, torch.Tensor] = {}

    def __call__(self, bucket):
        buf = bucket.buffer()
        v = self.velocity.get(bucket.index())
        if v is None or v.shape != buf.shape or v.dtype != buf.dtype:
            v = self.velocity[bucket.index()] = torch.zeros_like(buf)
        v.mul_(self.momentum).add_(buf)
        buf.copy_(v)
        return self.inner(bucket)

    def state_dict(self) -> dict:
        """The velocities (a checkpoint must keep them, like the ledgers)."""
        return {"momentum": self.momentum, "velocity": {k: v.clone() for k, v in self.velocity.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.momentum = float(state["momentum"])
        self.velocity = {int(k): v.clone() for k, v in state["velocity"].items()}


def call(state, bucket):  # no annotations: DDP checks them
    return state(bucket)
