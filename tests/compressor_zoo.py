"""One instance of every compressor configuration the tests sweep over."""
import torch

from milktea import (QSGD, Cast, Chain, Identity, PowerSGD, Quantize, RandomK, Sign, TernGrad,
                     TopK)

# each maker takes the compressor's keyword options (nonfinite=...; a chain passes them to
# its first stage, whose policy it takes)
ZOO = {
    "identity": Identity,
    "topk": lambda **kw: TopK(ratio=0.05, **kw),
    "topk-k1": lambda **kw: TopK(k=1, **kw),
    "topk-approx": lambda **kw: TopK(ratio=0.05, approximate=True, **kw),
    "topk-int32": lambda **kw: TopK(ratio=0.05, index="int32", **kw),
    "topk-bitmap": lambda **kw: TopK(ratio=0.5, index="bitmap", **kw),
    "randomk": lambda **kw: RandomK(ratio=0.05, **kw),
    "int8": lambda **kw: Quantize(bits=8, **kw),
    "int4": lambda **kw: Quantize(bits=4, chunk=100, **kw),
    "int2": lambda **kw: Quantize(bits=2, chunk=None, **kw),
    "int8-stochastic": lambda **kw: Quantize(bits=8, stochastic=True, **kw),
    "qsgd": lambda **kw: QSGD(levels=4, **kw),
    "terngrad": TernGrad,
    "sign": Sign,
    "fp16": lambda **kw: Cast(torch.float16, **kw),
    "bf16": lambda **kw: Cast(torch.bfloat16, **kw),
    "powersgd": lambda **kw: PowerSGD(rank=2, **kw),
    "topk+int8": lambda **kw: Chain(TopK(ratio=0.05, **kw), Quantize(bits=8)),
    "topk+sign": lambda **kw: Chain(TopK(ratio=0.05, **kw), Sign()),
}


def make_input(name, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(40, 50, generator=g).to(dtype)
    return x if name.startswith("powersgd") else x.t()   # also exercise non-contiguous input
