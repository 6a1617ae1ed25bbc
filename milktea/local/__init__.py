"""Local steps: workers train on their own for H steps, then exchange what changed.

DiLoCo (Douillard et al. 2023), Streaming DiLoCo (fragments, overlap, mixing) and
compressed pseudo-gradients (int8, 4-bit, Top-K with error feedback as in SparseLoCo),
in the simulator (`simulate`, `LocalRun`) and under torchrun (`milktea.local.dist`),
with one scheme object for both:

    >>> from milktea import Digits, Quantize
    >>> from milktea.local import DiLoCo, SGD, simulate
    >>> h = simulate(Digits(), DiLoCo(inner_steps=20, inner=SGD(lr=0.1), compressor=Quantize(bits=8)),
    ...              workers=4, steps=100, batch=16)
    >>> h.outer_steps
    5
"""
from .config import DataParallel, DiLoCo, Outage
from .exchange import weighted_mean
from .optim import SGD, AdamW, OuterSGD
from .simulator import LocalHistory, LocalRun, simulate

__all__ = ["AdamW", "DataParallel", "DiLoCo", "LocalHistory", "LocalRun", "OuterSGD", "Outage", "SGD",
           "simulate", "weighted_mean"]
