"""Momentum correction for a DDP communication hook (DGC's first technique, chapter 04).

Each worker keeps its own velocity u <- m u + g per parameter (`milktea.velocity.Velocity`,
the same class the simulator's `DGC` keeps) and hands u, not g, to the hook, whose ledger
then accumulates velocities; the optimizer runs without momentum. What is sent, summed over
time, is what dense momentum SGD would have applied; around a dense all-reduce it *is*
momentum SGD. Factor masking (clearing u where Top-K sent) is not done here: it needs the
positions, which only the compressor knows.

Velocities are keyed by parameter name, as the hook's ledgers are: DDP rebuilds its buckets
after the first step (static_graph after the second), and a bucket's index then holds other
parameters. milktea's own hook takes the option directly and saves the velocities with its
checkpoint:

    state = milktea.ddp.compress(ddp_model, TopK(0.01), error_feedback=True, momentum=0.9)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.05, momentum=0.0)   # the momentum lives in the hook

Around any other hook (PyTorch's, your own), wrap it; pass the wrapper to
`save_checkpoint(..., state=mc)` to keep its velocities:

    mc = MomentumCorrection(ddp_model, 0.9, inner=lambda b: default_hooks.allreduce_hook(None, b))
    ddp_model.register_comm_hook(mc, call)
"""
from __future__ import annotations

import torch

from milktea.checks import check_number
from milktea.velocity import Velocity

STATE_FORMAT = 1


class MomentumCorrection:
    """The bucket's gradients replaced by this worker's velocities, parameter by parameter,
    before `inner(bucket) -> Future` sees them (or before the caller's own hook goes on, with
    `correct(bucket)`). `model`: the (DDP) model, whose parameter names key the velocities.

    >>> net, seen = torch.nn.Linear(2, 1, bias=False), []
    >>> class Bucket:                             # what DDP hands a hook, as far as this reads it
    ...     def __init__(self, g): self.g = g
    ...     def buffer(self): return self.g
    ...     def parameters(self): return [net.weight]
    >>> mc = MomentumCorrection(net, 0.5, inner=lambda b: seen.append(b.buffer().clone()))
    >>> for _ in range(2):
    ...     _ = mc(Bucket(torch.ones(2)))
    >>> seen[-1]                                  # 0.5 * 1 + 1
    tensor([1.5000, 1.5000])
    >>> list(mc.velocity)
    ['weight']
    """

    def __init__(self, model, momentum: float, inner=None):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be the torch model (DDP or not) whose parameters the buckets hold, got "
                            f"{type(model).__name__}")
        if inner is not None and not callable(inner):
            raise TypeError(f"inner must be a hook callable inner(bucket) -> Future, got {type(inner).__name__}")
        self.inner = inner
        self.momentum = check_number(momentum, "momentum", 0.0, 1.0, open_high=True)
        self._names = {id(p): n for n, p in getattr(model, "module", model).named_parameters()}
        self.velocity: dict[str, Velocity] = {}

    def correct(self, bucket) -> None:
        """u <- m u + g for each parameter of the bucket, by name; its gradient becomes u."""
        buf, offset = bucket.buffer(), 0
        for p in bucket.parameters():
            name = self._names.get(id(p))
            if name is None:
                raise ValueError("a bucket holds a parameter that is not the model's: build MomentumCorrection "
                                 "with the model the DDP hook is registered on")
            view = buf.narrow(0, offset, p.numel())
            offset += p.numel()
            v = self.velocity.get(name)
            if v is None:
                v = self.velocity[name] = Velocity(self.momentum)
            view.copy_(v.step(view))
        if offset != buf.numel():
            raise ValueError(f"the bucket's parameters hold {offset} entries, its buffer {buf.numel()}")

    def __call__(self, bucket):
        if self.inner is None:
            raise TypeError("this MomentumCorrection wraps no hook: give inner= (or call correct(bucket) "
                            "from your own hook)")
        self.correct(bucket)
        return self.inner(bucket)

    def state_dict(self) -> dict:
        """The velocities by parameter name (a checkpoint must keep them, like the ledgers)."""
        return {"format": STATE_FORMAT, "momentum": self.momentum,
                "velocity": {n: v.state_dict() for n, v in self.velocity.items()}}

    def load_state_dict(self, state: dict, device=None) -> None:
        """Restore what `state_dict()` returned (names must be this model's)."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError("load_state_dict expects what MomentumCorrection.state_dict() returned "
                             f"(format {STATE_FORMAT})")
        names = set(self._names.values())
        unknown = sorted(set(state["velocity"]) - names)
        if unknown:
            raise ValueError(f"saved velocities for parameters this model does not have: {unknown[:5]}")
        self.momentum = check_number(state["momentum"], "momentum", 0.0, 1.0, open_high=True)
        self.velocity = {}
        for name, saved in state["velocity"].items():
            v = self.velocity[name] = Velocity(self.momentum)
            v.load_state_dict(saved, device=device)

    def __repr__(self) -> str:
        return f"MomentumCorrection(momentum={self.momentum:g}, {len(self.velocity)} velocities)"


def call(state, bucket):  # no annotations: DDP checks them
    return state(bucket)
