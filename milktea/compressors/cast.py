"""Cast to a 16-bit float: 2 bytes per entry instead of 4 (the fp16/bf16 hooks' idea)."""
from __future__ import annotations

import torch

from ..packet import DTYPES, Packet, register_decoder
from .base import Compressor, from_bytes, output, to_bytes

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
    summable = True

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

    def _compress(self, t):
        h = t.to(self.dtype)
        if self.dtype == torch.float16 and self.nonfinite != "ignore" and bool(torch.isinf(h).any()):
            raise ValueError("the gradient exceeds float16's range (|x| > 65504); use "
                             "Cast(torch.bfloat16), or scale the gradient down before casting")
        return Packet("cast", tuple(t.shape), t.dtype, (DTYPES[self.dtype],), (to_bytes(h),))


def _decode_cast(packet, out=None):
    res = output(packet, out)
    half = _BY_CODE.get(packet.params[0])
    if half is None:
        raise ValueError(f"cast packet names an unknown 16-bit dtype code {packet.params[0]}")
    res.view(-1).copy_(from_bytes(packet.parts[0], half))
    return res


register_decoder("cast", _decode_cast)
