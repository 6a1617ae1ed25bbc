"""Momentum correction's velocity: DGC's first technique, for one tensor stream.

With a biased compressor and error feedback, the optimizer's momentum meets updates that
arrive late and in lumps. Momentum correction moves the momentum before the compressor:
each worker keeps its own velocity

    u <- m u + g

and hands u, not g, to the compressor (whose ledger then accumulates velocities); the
optimizer runs without momentum. It is linear: around a dense all-reduce it is momentum
SGD, bit for bit on one worker (torch.optim.SGD's buffer is the same u, stepped by the
same two operations).

One class for every momentum-corrected path in the library: `feedback.DGC` and
`feedback.MomentumCorrected` (the simulator) keep one `Velocity`, the DDP hook one per
parameter name (`milktea.distributed.momentum`). Like a `Ledger`, it is float32 for
float32, float16 and bfloat16 gradients (float64 stays float64): a velocity is a running
sum, and a bfloat16 one would round the small gradients it sums away.

>>> import torch
>>> u = Velocity(momentum=0.5)
>>> u.step(torch.tensor([1.0, 2.0], dtype=torch.bfloat16))      # float32, though g was bfloat16
tensor([1., 2.])
>>> u.step(torch.tensor([1.0, 2.0]))                              # 0.5 * u + g
tensor([1.5000, 3.0000])
>>> u.mask(torch.tensor([1])); u.tensor                           # DGC's factor masking
tensor([1.5000, 0.0000])
"""
from __future__ import annotations

import torch

from .checks import check_number


class Velocity:
    """u <- m u + g for one tensor stream (`tensor`, None before the first step).

    momentum: m, in [0, 1)."""

    def __init__(self, momentum: float):
        self.momentum = check_number(momentum, "momentum", 0.0, 1.0, open_high=True)
        self.tensor: torch.Tensor | None = None

    @staticmethod
    def dtype_for(dtype: torch.dtype) -> torch.dtype:
        """The velocity's dtype for gradients of `dtype`: float64 stays, the rest is float32."""
        return torch.float64 if dtype == torch.float64 else torch.float32

    def step(self, grad: torch.Tensor) -> torch.Tensor:
        """u <- m u + g; return u (this velocity's own tensor: read it, do not write it).
        The first gradient makes u (zeros, then g); a later one must have its shape."""
        dtype = self.dtype_for(grad.dtype)
        u = self.tensor
        if u is None:
            u = self.tensor = torch.zeros(grad.shape, dtype=dtype, device=grad.device)
        elif u.shape != grad.shape or u.dtype != dtype or u.device != grad.device:
            raise ValueError(f"this velocity holds a {tuple(u.shape)} {u.dtype} tensor on {u.device}; got a "
                             f"{tuple(grad.shape)} {grad.dtype} gradient on {grad.device}. Keep one velocity "
                             f"per tensor, or reset() it")
        with torch.no_grad():
            u.mul_(self.momentum).add_(grad)
        return u

    def mask(self, index: torch.Tensor) -> None:
        """Clear the velocity at the flat positions `index` (DGC's momentum factor masking:
        the entries just sent stop being pushed by their old velocity)."""
        if self.tensor is not None:
            self.tensor.view(-1)[index] = 0

    def reset(self) -> None:
        self.tensor = None

    def state_dict(self) -> dict:
        return {"momentum": self.momentum, "tensor": None if self.tensor is None else self.tensor.clone()}

    def load_state_dict(self, state: dict, device=None) -> None:
        """Restore what `state_dict` returned (on `device`, if given)."""
        if not isinstance(state, dict) or set(state) != {"momentum", "tensor"}:
            raise ValueError("load_state_dict expects what Velocity.state_dict() returned")
        self.momentum = check_number(state["momentum"], "momentum", 0.0, 1.0, open_high=True)
        t = state["tensor"]
        if t is None:
            self.tensor = None
            return
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise ValueError(f"a saved velocity is a float tensor, got {type(t).__name__}")
        dev = t.device if device is None else device
        self.tensor = t.to(device=dev, dtype=self.dtype_for(t.dtype), copy=True)

    def __repr__(self) -> str:
        if self.tensor is None:
            return f"Velocity(momentum={self.momentum:g}, empty)"
        return f"Velocity(momentum={self.momentum:g}, {tuple(self.tensor.shape)} {self.tensor.dtype})"
