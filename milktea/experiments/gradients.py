"""Real gradients to look at: the digits classifier part-way through training.

    >>> g = layer_gradients()
    >>> sorted(g)
    ['0.bias', '0.weight', '2.bias', '2.weight']
    >>> tuple(g["0.weight"].shape)      # hidden x 64 pixels
    (128, 64)
"""
from __future__ import annotations

from functools import lru_cache

import torch

from ..checks import check_int
from ..tasks import Digits


@lru_cache(maxsize=4)
def _layer_gradients(hidden: int, warmup_steps: int, batch: int, seed: int):
    task = Digits(hidden=hidden, seed=seed)
    model = task.model()
    x, y = task.x_train, task.y_train
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(warmup_steps):
        idx = torch.randint(len(y), (batch,), generator=gen)
        opt.zero_grad()
        task.loss(model(x[idx]), y[idx]).mean().backward()
        opt.step()
    idx = torch.randint(len(y), (batch,), generator=gen)
    model.zero_grad()
    task.loss(model(x[idx]), y[idx]).mean().backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def layer_gradients(hidden: int = 128, warmup_steps: int = 30, batch: int = 64,
                    seed: int = 0) -> dict[str, torch.Tensor]:
    """One minibatch gradient of the digits MLP (64 -> `hidden` -> 10) after
    `warmup_steps` steps of SGD (lr 0.1, minibatches of `batch`): a gradient from the
    middle of a real training run, per parameter tensor (float32, CPU). Cached; every
    call returns fresh copies."""
    check_int(hidden, "hidden", 1), check_int(warmup_steps, "warmup_steps", 0)
    check_int(batch, "batch", 1), check_int(seed, "seed", 0)
    return {k: v.clone() for k, v in _layer_gradients(hidden, warmup_steps, batch, seed).items()}


def flat_gradient(hidden: int = 128, warmup_steps: int = 30, batch: int = 64, seed: int = 0) -> torch.Tensor:
    """The same gradient as one flat vector (what one bucket of a DDP step would send)."""
    return torch.cat([g.reshape(-1) for g in layer_gradients(hidden, warmup_steps, batch, seed).values()])
