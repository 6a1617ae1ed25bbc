"""The two optimizers of local-step training, written on flat tensors.

The inner optimizer runs on every worker between exchanges; here it works on the rows of
a [workers, n] matrix, one row per worker, each row stepped with PyTorch's own
single-tensor formula (so one row is bit for bit what `torch.optim.AdamW(foreach=False)`
or `torch.optim.SGD` does to a tensor of n parameters, which the tests check). The outer
optimizer runs at head office on the averaged pseudo-gradient: SGD with (Nesterov)
momentum, `torch.optim.SGD`'s formula on one flat vector.

    >>> import torch
    >>> rows = torch.ones(2, 3)                    # two workers, three parameters each
    >>> sgd = SGD(lr=0.5)
    >>> state = sgd.start(rows)
    >>> sgd.step(rows, torch.tensor([[1., 0, 0], [0, 0, 2]]), state)
    >>> rows
    tensor([[0.5000, 1.0000, 1.0000],
            [1.0000, 1.0000, 0.0000]])
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..checks import check_number


def _check_betas(betas) -> tuple[float, float]:
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise TypeError(f"betas must be a pair (beta1, beta2), got {betas!r}")
    return tuple(check_number(b, f"betas[{i}]", 0, 1, open_high=True) for i, b in enumerate(betas))


@dataclass(frozen=True)
class AdamW:
    """AdamW for the inner steps (DiLoCo's default inner optimizer), torch's defaults.

    state: "step" (one count per row: a worker that was away has taken fewer), "exp_avg",
    "exp_avg_sq" ([workers, n] each)."""
    lr: float = 1e-3
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01

    def __post_init__(self):
        object.__setattr__(self, "lr", check_number(self.lr, "inner lr", 0, open_low=True))
        object.__setattr__(self, "betas", _check_betas(self.betas))
        object.__setattr__(self, "eps", check_number(self.eps, "eps", 0, open_low=True))
        object.__setattr__(self, "weight_decay", check_number(self.weight_decay, "weight_decay", 0))

    name = "adamw"

    def start(self, rows: torch.Tensor) -> dict:
        return {"step": [0] * rows.shape[0], "exp_avg": torch.zeros_like(rows),
                "exp_avg_sq": torch.zeros_like(rows)}

    @torch.no_grad()
    def step(self, rows: torch.Tensor, grads: torch.Tensor, state: dict, active=None) -> None:
        """One step on every active row (all rows when `active` is None), in place."""
        beta1, beta2 = self.betas
        for w in range(rows.shape[0]) if active is None else active:
            p, g, m, v = rows[w], grads[w], state["exp_avg"][w], state["exp_avg_sq"][w]
            state["step"][w] += 1
            t = state["step"][w]
            # torch.optim.adamw's single-tensor path, operation for operation
            p.mul_(1 - self.lr * self.weight_decay)
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            step_size = self.lr / (1 - beta1 ** t)
            denom = (v.sqrt() / math.sqrt(1 - beta2 ** t)).add_(self.eps)
            p.addcdiv_(m, denom, value=-step_size)


@dataclass(frozen=True)
class SGD:
    """SGD with optional heavy-ball momentum for the inner steps (torch.optim.SGD's formula)."""
    lr: float = 0.1
    momentum: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "lr", check_number(self.lr, "inner lr", 0, open_low=True))
        object.__setattr__(self, "momentum", check_number(self.momentum, "momentum", 0, 1, open_high=True))

    name = "sgd"

    def start(self, rows: torch.Tensor) -> dict:
        return {"step": [0] * rows.shape[0],
                "momentum_buffer": torch.zeros_like(rows) if self.momentum else None}

    @torch.no_grad()
    def step(self, rows: torch.Tensor, grads: torch.Tensor, state: dict, active=None) -> None:
        for w in range(rows.shape[0]) if active is None else active:
            g = grads[w]
            if self.momentum:
                buf = state["momentum_buffer"][w]
                if state["step"][w] == 0:
                    buf.copy_(g)
                else:
                    buf.mul_(self.momentum).add_(g)
                g = buf
            state["step"][w] += 1
            rows[w].add_(g, alpha=-self.lr)


@dataclass(frozen=True)
class OuterSGD:
    """Head office's optimizer: SGD on the averaged pseudo-gradient. DiLoCo's setting is
    lr 0.7 with Nesterov momentum 0.9; lr 1 without momentum is plain parameter averaging
    (`nesterov` matters only with momentum).

    >>> theta, delta = torch.tensor([1.0, 2.0]), torch.tensor([0.5, -1.0])   # delta = theta - mean(local)
    >>> OuterSGD(lr=1.0, momentum=0.0).step(theta, delta, {})
    >>> theta                                                                 # = mean(local)
    tensor([0.5000, 3.0000])
    """
    lr: float = 0.7
    momentum: float = 0.9
    nesterov: bool = True

    def __post_init__(self):
        object.__setattr__(self, "lr", check_number(self.lr, "outer lr", 0, open_low=True))
        object.__setattr__(self, "momentum", check_number(self.momentum, "outer momentum", 0, 1, open_high=True))
        if not isinstance(self.nesterov, bool):
            raise TypeError(f"nesterov must be True or False, got {self.nesterov!r}")

    @torch.no_grad()
    def step(self, theta: torch.Tensor, delta: torch.Tensor, state: dict) -> None:
        """theta -= lr * u, in place, where u is delta through the momentum; `state` holds
        this fragment's "momentum_buffer" (created on the first step)."""
        u = delta
        if self.momentum:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = delta.clone()
            else:
                buf.mul_(self.momentum).add_(delta)
            u = delta.add(buf, alpha=self.momentum) if self.nesterov else buf
        theta.add_(u, alpha=-self.lr)


INNER = (AdamW, SGD)
