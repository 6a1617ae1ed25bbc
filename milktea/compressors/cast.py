"""Cast to a 16-bit float: 2 bytes per entry instead of 4 (the fp16/bf16 hooks' idea)."""
from __future__ import annotations

import torch

from .. import buffers, kernels
from .base import Compressor
from .packet import DTYPES, Packet
from .registry import library_codec
from .wire import dense_add, dense_decode, expect_layout, to_bytes

FP16_OVERFLOW = ("the gradient exceeds float16's range (|x| > 65504); use Cast(torch.bfloat16), or scale "
                 "the gradient down before casting")
_HALF = {torch.float16: "fp16", torch.bfloat16: "bf16"}
_BY_CODE = {DTYPES[d]: d for d in _HALF}


class Cast(Compressor):
    """Send the gradient as float16 or bfloat16.

    float16 keeps 10 mantissa bits but overflows above 65504; bfloat16 keeps the
    float32 range with only 7 mantissa bits. An fp16 overflow raises (it would
    silently send inf) with the advice to use bfloat16 or to scale first.

    >>> Cast(torch.bfloat16).compress(torch.ones(1000)).ratio > 1.9
    True
    """
    codec = "cast"
    protocol = "allreduce"
    carries_nonfinite = True

    def __init__(self, dtype: torch.dtype = torch.float16, nonfinite: str = "raise"):
        super().__init__(nonfinite)
        if dtype not in _HALF:
            raise ValueError(f"Cast sends torch.float16 or torch.bfloat16, got {dtype}")
        self.dtype = dtype

    @property
    def name(self) -> str:
        return _HALF[self.dtype]

    def _repr_args(self):
        return {"dtype": self.dtype}

    @property
    def overflow_at(self) -> float:
        # float16 rounds |x| >= 65520 (65504 plus half a step) to inf
        return 65520.0 if self.dtype == torch.float16 else float("inf")

    def _compress(self, t):
        h = _cast_compiled(t, self.dtype) if self.nonfinite != "ignore" else None
        if h is None:
            h = t.to(self.dtype)
            # a finite entry must not come back infinite; under "ignore" an infinity sent as one is fine
            if self.dtype == torch.float16 and bool(torch.isinf(h).any()) and (
                    self.nonfinite != "ignore" or bool((torch.isinf(h) & torch.isfinite(t)).any())):
                raise ValueError(FP16_OVERFLOW)
        return Packet("cast", tuple(t.shape), t.dtype, (DTYPES[self.dtype],), (to_bytes(h),))


def _cast_compiled(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """t (finite: checked by the caller's policy) as `dtype` through the compiled loop, the
    bits of t.to(dtype) in one pass; ValueError for a float16 overflow. None where the loop
    does not run (not float32 on the CPU, small, numba off)."""
    if t.dtype != torch.float32 or kernels.jit(t) is None:
        return None
    from milktea import numba_cast
    import numpy as np
    x = t.reshape(-1).contiguous()
    h = buffers.empty(x.numel(), dtype)
    over = numba_cast.cast16(x.view(torch.int32).numpy().view(np.uint32), h.view(torch.int16).numpy(),
                             dtype == torch.bfloat16)
    if over:
        raise ValueError(FP16_OVERFLOW)
    return h.view(t.shape)


def _half_of(packet) -> torch.dtype:
    expect_layout(packet, 1, 1)
    half = _BY_CODE.get(packet.params[0])
    if half is None:
        raise ValueError(f"malformed cast packet: unknown 16-bit dtype code {packet.params[0]} "
                         f"(known: {sorted(_BY_CODE)})")
    return half


def _cast_cost(compressor, shape, dtype) -> int:
    n = 1
    for d in shape:
        n *= d
    return 2 * n


CAST = library_codec(Cast, 7, 0.5, lambda p, out=None: dense_decode(p, out, _half_of(p), nparams=1),
                     add=lambda p, out, alpha: dense_add(p, out, alpha, _half_of(p), nparams=1), cost=_cast_cost,
                     schemes={"fp16": ("fp16", lambda ratio, rank: Cast(torch.float16), False),
                              "bf16": ("bf16", lambda ratio, rank: Cast(torch.bfloat16), False)})
