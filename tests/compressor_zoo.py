"""One instance of every compressor configuration the tests sweep over."""
import torch

from milktea import (QSGD, Cast, Chain, Identity, PowerSGD, Quantize, RandomK, Sign, TernGrad,
                     TopK)

ZOO = {
    "identity": Identity,
    "topk": lambda: TopK(ratio=0.05),
    "topk-k1": lambda: TopK(k=1),
    "topk-approx": lambda: TopK(ratio=0.05, approximate=True),
    "topk-int32": lambda: TopK(ratio=0.05, index="int32"),
    "topk-bitmap": lambda: TopK(ratio=0.5, index="bitmap"),
    "randomk": lambda: RandomK(ratio=0.05),
    "int8": lambda: Quantize(bits=8),
    "int4": lambda: Quantize(bits=4, chunk=100),
    "int2": lambda: Quantize(bits=2, chunk=None),
    "int8-stochastic": lambda: Quantize(bits=8, stochastic=True),
    "qsgd": lambda: QSGD(levels=4),
    "terngrad": TernGrad,
    "sign": Sign,
    "fp16": lambda: Cast(torch.float16),
    "bf16": lambda: Cast(torch.bfloat16),
    "powersgd": lambda: PowerSGD(rank=2),
    "topk+int8": lambda: Chain(TopK(ratio=0.05), Quantize(bits=8)),
    "topk+sign": lambda: Chain(TopK(ratio=0.05), Sign()),
}


def make_input(name, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(40, 50, generator=g).to(dtype)
    return x if name.startswith("powersgd") else x.t()   # also exercise non-contiguous input
